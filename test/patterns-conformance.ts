/**
 * Pattern conformance suite, written once, run on every bus backend (test/patterns-memory,
 * -journal, -kafka .test.ts). Each test states a guarantee of a pattern (engine/patterns) or a
 * case of ../shared/cases/patterns.md (P1-P3).
 *
 * Known limits: as in test/bus-conformance.ts, a backend run names tests its environment cannot
 * show; such a test still runs, and a failure prints a `SKIP` line (test, reason, observed
 * assertion) instead of counting; a pass prints a `NOTE`. Nothing is silently skipped.
 * PATTERNS_ONLY=<substring> registers only the tests whose name contains it (for debugging one).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import type { BusBackend, ConsumedRecord } from '../engine/bus/index.js';
import {
  jsonCodec,
  RpcRemoteError,
  RpcTimeoutError,
  startRpcResponder,
  startRpcSender,
  startCompacted,
  startDurable,
  startPubSub,
  startStateAndEvent,
  stringCodec,
  type DurableOutcome,
  type PatternRecord,
  type Subscription,
} from '../engine/patterns/index.js';
import {
  bytes,
  echoProcessor,
  readTopic,
  text,
  waitForRecords,
  type ChildBusSpec,
} from './patterns-helpers.js';
import {
  libraryRunner,
  logFile,
  readLog,
  type ProcessorRunner,
  type ProcessorSpec,
  type RunningProcessor,
} from './patterns-runners.js';
import { INJECTED_COMMIT_FAILURE } from '../engine/processors/faults.js';

/** A backend under test. */
export interface PatternBackend {
  bus: BusBackend;
  /** Durable backends: closes nothing, opens the same bus again (after `bus` was closed). */
  reopen?: () => Promise<BusBackend>;
  /** When set, the crash test kills a child process (kill -9) running on this bus. */
  crashChild?: ChildBusSpec;
}

export interface PatternConformanceOptions {
  knownLimits?: Record<string, string>;
  /** Test name -> why it is not run on this backend (printed as a SKIP line, never silent). */
  notRun?: Record<string, string>;
  after?: () => Promise<void>;
  /** Per-test bound, ms. Default 20000. */
  testTimeoutMs?: number;
  sessionTimeoutMs?: number;
  /**
   * The durable pattern's `fencing`; default: the pattern's default for the bus. With 'partition'
   * every member of a group gets the same transactionalId prefix (the group's), as that mode needs.
   */
  durableFencing?: 'member' | 'partition';
  /**
   * How the processors of the tests written against handler modules (test/fixtures/processors)
   * run: as a library in this thread (default), or as actors from a topology file
   * (test/patterns-runners.ts actorRunner). Every test runs either way: where the library case
   * uses a closure of the test (a fault hook, a member started mid-batch, a listener log), the
   * actor case uses a handler module and the processor actor's test-only fault hook instead.
   */
  runner?: ProcessorRunner;
}

export const PATTERNS = {
  crash: 'durable: exactly once under a crash between processing and commit',
  retry: 'durable: a failed commit rewinds to the committed position and retries; outputs once',
  p1: 'durable: partitions reassigned while a batch is processed; each output once (case P1)',
  p2: 'durable: does not skip past an open input transaction; aborted inputs never processed (case P2)',
  p3: 'durable: an undecodable record goes to the dead-letter topic once; good records once (case P3)',
  pubsub: 'pub/sub: starts at the end; records produced before the start are never seen',
  compacted: 'compacted: snapshot holds the latest value per key after deletes; survives a restart',
  sae: 'state-and-event: a state and an event of one key present at startup: the event sees the state',
  rpc: 'rpc: response on the request partition; slow and lost requests time out; a late response is dropped',
  p4: 'state-and-event: a new partition with 1000 states is loaded before its events, during a slow event (case P4)',
} as const;

let seq = 0;
const name = (base: string): string =>
  `${base}-${process.pid}-${++seq}-${Math.random().toString(36).slice(2, 7)}`;

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>(
      (_, reject) =>
        (timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms)),
    ),
  ]);
}

/** Resolves once `file` exists (polled every 20 ms); rejects after `ms`. */
async function waitForFile(file: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!fs.existsSync(file)) {
    if (Date.now() > deadline) throw new Error(`${file}: not written within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const outputsOnce = (got: ConsumedRecord[], count: number): void => {
  const values = got.map(text).sort();
  const expected = Array.from({ length: count }, (_, i) => `o:v${i}`).sort();
  assert.equal(values, expected, 'each input yields its output exactly once');
};

/** Registers and runs the suite for one backend; `make` is called once per test. */
export function patternConformance(
  backendName: string,
  make: () => Promise<PatternBackend>,
  opts: PatternConformanceOptions = {},
): void {
  const runner = opts.runner ?? libraryRunner;
  const s = suite(
    `pattern conformance: ${backendName}${runner.mode === 'actor' ? ', as actors from a topology file' : ''}`,
  );
  const limits = opts.knownLimits ?? {};
  const notRun: Record<string, string> = { ...opts.notRun };
  const running: RunningProcessor[] = [];
  /** Starts a processor the configured way (library or actor); stopped after the test. */
  const run = async (bus: BusBackend, spec: ProcessorSpec): Promise<RunningProcessor> => {
    const grouped = spec.pattern === 'durable' || spec.pattern === 'state-and-event';
    const r = await runner.start(bus, {
      ...(grouped ? { sessionTimeoutMs: opts.sessionTimeoutMs } : {}),
      ...spec,
    });
    running.push(r);
    return r;
  };
  const timeoutMs = opts.testTimeoutMs ?? 20_000;
  const subs: Subscription[] = [];
  const track = <S extends Subscription>(sub: S): S => (subs.push(sub), sub);

  const it = (title: string, body: (pb: PatternBackend) => Promise<void>): void => {
    if (process.env.PATTERNS_ONLY && !title.includes(process.env.PATTERNS_ONLY)) return;
    const reason = notRun[title];
    if (reason) {
      s(title, () => console.log(`  SKIP [${backendName}] "${title}": not run: ${reason}`));
      return;
    }
    s(title, async () => {
      const pb = await make();
      try {
        await withTimeout(body(pb), timeoutMs, title);
        if (limits[title])
          console.log(
            `  NOTE [${backendName}] known limit not observed, test passed: "${title}" (${limits[title]})`,
          );
      } catch (e) {
        if (!limits[title]) throw e;
        const a = e as Error & { actual?: unknown };
        const actual =
          a.actual !== undefined ? ` actual=${JSON.stringify(a.actual).slice(0, 200)}` : '';
        console.log(
          `  SKIP [${backendName}] "${title}": ${limits[title]}; observed: ${a.message.split('\n')[0]}${actual}`,
        );
      } finally {
        for (const sub of subs.splice(0)) await sub.stop({ abandon: true });
        for (const r of running.splice(0)) await r.stop().catch(() => {});
        await pb.bus.close();
      }
    });
  };

  const partitionFencing = (bus: BusBackend): boolean =>
    opts.durableFencing === 'partition' ||
    (opts.durableFencing === undefined && bus.kind === 'kafka');
  const durable = (
    bus: BusBackend,
    input: string,
    output: string,
    group: string,
    extra: Partial<Parameters<typeof startDurable<string>>[0]> = {},
  ) =>
    track(
      startDurable({
        bus,
        groupId: group,
        topics: [input],
        codec: stringCodec,
        ...(partitionFencing(bus)
          ? { fencing: 'partition' as const, transactionalId: `${group}-tx` }
          : { fencing: opts.durableFencing ?? 'member', transactionalId: name('tx') }),
        processor: echoProcessor(output),
        batchSizeMax: 10,
        sessionTimeoutMs: opts.sessionTimeoutMs,
        ...extra,
      }),
    );

  const seed = async (
    bus: BusBackend,
    input: string,
    count: number,
    partitions: number,
  ): Promise<void> => {
    await bus.createTopics([{ name: input, partitions }]);
    const p = await bus.producer();
    await p.send(
      Array.from({ length: count }, (_, i) => ({
        topic: input,
        key: `k${i % 7}`,
        value: bytes(`v${i}`),
      })),
    );
    await p.close();
  };

  it(PATTERNS.crash, async (pb) => {
    const [input, output, group] = [name('in'), name('out'), name('g')];
    await seed(pb.bus, input, 40, 2);
    await pb.bus.createTopics([{ name: output, partitions: 2 }]);
    if (runner.mode === 'actor') {
      // The crash is the actor's worker thread exiting in the middle of the batch holding v17
      // (test/fixtures/processors/crash-once.ts), once; the supervisor restarts it.
      const marker = `${logFile()}.crashed`;
      await run(pb.bus, {
        pattern: 'durable',
        handler: 'crash-once',
        inputs: [input],
        outputs: [output],
        group,
        codec: 'string',
        batchSizeMax: 10,
        settings: { crashOn: 'v17', markerFile: marker },
      });
      outputsOnce(await waitForRecords(pb.bus, output, 40), 40);
      await new Promise((r) => setTimeout(r, 300));
      outputsOnce(await readTopic(pb.bus, output), 40);
      assert.ok(fs.existsSync(marker), 'the worker died mid-batch');
      return;
    }
    let bus = pb.bus;
    if (pb.crashChild && pb.reopen) {
      await bus.close();
      // With 'partition' fencing the child's ids are the group's, as every member's: the next
      // member's producers fence the child and abort its open transaction.
      const fence = partitionFencing(bus)
        ? ['partition', String(opts.sessionTimeoutMs ?? 10_000)]
        : [];
      const txId = partitionFencing(bus) ? `${group}-tx` : name('tx');
      const child = spawn(
        process.execPath,
        [
          fileURLToPath(new URL('./patterns-crash.child.js', import.meta.url)),
          JSON.stringify(pb.crashChild),
          input,
          output,
          group,
          txId,
          '2',
          ...fence,
        ],
        { stdio: ['ignore', 'inherit', 'inherit'] },
      );
      const signal = await new Promise<string | null>((r) => child.on('exit', (_c, sig) => r(sig)));
      assert.is(signal, 'SIGKILL', 'the child died by kill -9 before its 2nd commit');
      pb.bus = bus = await pb.reopen();
    } else {
      let batches = 0;
      const crashed = new Promise<void>((resolve) => {
        durable(bus, input, output, group, {
          faults: {
            beforeCommit: () =>
              ++batches === 2 ? (resolve(), new Promise<void>(() => {})) : undefined,
          },
        });
      });
      await crashed;
      await subs[subs.length - 1].stop({ abandon: true }); // the process "dies": its open transaction is aborted
    }
    const committedBefore = (await readTopic(bus, output)).length;
    assert.is(committedBefore, 10, 'only the first batch was committed before the crash');
    durable(bus, input, output, group);
    outputsOnce(await waitForRecords(bus, output, 40), 40);
  });

  it(PATTERNS.retry, async (pb) => {
    const [input, output, group] = [name('in'), name('out'), name('g')];
    await seed(pb.bus, input, 30, 1);
    await pb.bus.createTopics([{ name: output, partitions: 1 }]);
    const inOrder = (got: ConsumedRecord[]): void =>
      assert.equal(
        got.map(text),
        Array.from({ length: 30 }, (_, i) => `o:v${i}`),
        'in input order (one partition)',
      );
    if (runner.mode === 'actor') {
      // The processor actor's 2nd transaction commit throws once (engine/processors/faults.ts).
      const actor = await run(pb.bus, {
        pattern: 'durable',
        handler: 'echo',
        inputs: [input],
        outputs: [output],
        group,
        codec: 'string',
        batchSizeMax: 10,
        faults: { commitFailsAt: 2 },
      });
      const got = await waitForRecords(pb.bus, output, 30);
      outputsOnce(got, 30);
      const failed = (): string[] =>
        actor.logs().filter((l) => l.includes(INJECTED_COMMIT_FAILURE));
      for (let waited = 0; failed().length === 0 && waited < 5000; waited += 20)
        await new Promise((r) => setTimeout(r, 20));
      assert.ok(
        failed().length >= 1,
        `the failed transaction is reported, with the injected error: ${actor.logs().join(' | ')}`,
      );
      await new Promise((r) => setTimeout(r, 300));
      const all = await readTopic(pb.bus, output);
      outputsOnce(all, 30);
      inOrder(all);
      return;
    }
    let batches = 0;
    const outcomes: DurableOutcome[] = [];
    const sub = durable(pb.bus, input, output, group, {
      faults: {
        beforeCommit: () => {
          if (++batches === 2) throw new Error('injected commit failure');
        },
      },
      onOutcome: (o) => outcomes.push(o),
    });
    const got = await waitForRecords(pb.bus, output, 30);
    outputsOnce(got, 30);
    assert.is(sub.stats.batchesFailed, 1);
    // onOutcome: the failed transaction is reported with its error; committed outcomes cover
    // every input (an outcome is reported when the pattern next settles, after at most one poll).
    const committedRecords = (): number =>
      outcomes.reduce((n, o) => n + (o.committed ? o.records : 0), 0);
    for (let waited = 0; committedRecords() < 30 && waited < 5000; waited += 20)
      await new Promise((r) => setTimeout(r, 20));
    assert.ok(
      outcomes.some(
        (o) => !o.committed && String((o.error as Error).message) === 'injected commit failure',
      ),
      `a failed outcome carries the injected error: ${JSON.stringify(outcomes)}`,
    );
    assert.ok(
      committedRecords() >= 30,
      `committed outcomes cover all 30 inputs: ${JSON.stringify(outcomes)}`,
    );
    inOrder(got);
  });

  it(PATTERNS.p1, async (pb) => {
    const [input, output, group] = [name('in'), name('out'), name('g')];
    await seed(pb.bus, input, 10, 1);
    await pb.bus.createTopics([{ name: output, partitions: 1 }]);
    if (runner.mode === 'actor') {
      // The handler pauses in the batch holding v3 (test/fixtures/processors/pause-on.ts) and
      // signals through a file; a second actor joins the group then; the first batch goes on
      // once the second is running (or after a second, if its start waits for the rebalance).
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_p1-'));
      const [signalFile, releaseFile] = [path.join(dir, 'paused'), path.join(dir, 'release')];
      try {
        await run(pb.bus, {
          pattern: 'durable',
          handler: 'pause-on',
          inputs: [input],
          outputs: [output],
          group,
          codec: 'string',
          batchSizeMax: 10,
          settings: { pauseOn: 'v3', signalFile, releaseFile },
        });
        await waitForFile(signalFile, timeoutMs);
        const second = run(pb.bus, {
          pattern: 'durable',
          handler: 'echo',
          inputs: [input],
          outputs: [output],
          group,
          codec: 'string',
          batchSizeMax: 10,
        });
        await Promise.race([second, new Promise((r) => setTimeout(r, 1000))]);
        fs.writeFileSync(releaseFile, '');
        await second;
        const got = await waitForRecords(pb.bus, output, 10);
        await new Promise((r) => setTimeout(r, 500));
        outputsOnce([...got, ...(await readTopic(pb.bus, output)).slice(got.length)], 10);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
      return;
    }
    let joined = false;
    const processor = echoProcessor(output);
    durable(pb.bus, input, output, group, {
      processor: {
        onNext: async (records: PatternRecord<string>[]) => {
          if (!joined && records.some((r) => r.value === 'v3')) {
            joined = true; // a second member joins mid-batch: the partition may move to it
            durable(pb.bus, input, output, group);
            await new Promise((r) => setTimeout(r, 300));
          }
          return processor.onNext(records);
        },
      },
    });
    const got = await waitForRecords(pb.bus, output, 10);
    await new Promise((r) => setTimeout(r, 500));
    outputsOnce([...got, ...(await readTopic(pb.bus, output)).slice(got.length)], 10);
  });

  it(PATTERNS.p2, async (pb) => {
    const [input, output, group] = [name('in'), name('out'), name('g')];
    await pb.bus.createTopics([
      { name: input, partitions: 1 },
      { name: output, partitions: 1 },
    ]);
    const pa = await pb.bus.producer({ transactionalId: name('txa') });
    const pbk = await pb.bus.producer({ transactionalId: name('txb') });
    const pc = await pb.bus.producer({ transactionalId: name('txc') });
    const aborted = await pc.begin();
    await aborted.send([{ topic: input, key: 'k', value: bytes('aborted'), partition: 0 }]);
    await aborted.abort();
    const a = await pa.begin();
    await a.send([{ topic: input, key: 'k', value: bytes('v0'), partition: 0 }]);
    const b = await pbk.begin();
    await b.send([{ topic: input, key: 'k', value: bytes('v1'), partition: 0 }]);
    await b.commit();
    await run(pb.bus, {
      pattern: 'durable',
      handler: 'echo',
      inputs: [input],
      outputs: [output],
      group,
      codec: 'string',
      batchSizeMax: 10,
    });
    await new Promise((r) => setTimeout(r, 800));
    assert.equal(
      (await readTopic(pb.bus, output)).map(text),
      [],
      'nothing is processed past the open transaction',
    );
    await a.commit();
    const got = await waitForRecords(pb.bus, output, 2);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(
      (await readTopic(pb.bus, output)).map(text),
      ['o:v0', 'o:v1'],
      'then 0 before 1, the aborted record never',
    );
    assert.is(got.length, 2);
  });

  it(PATTERNS.p3, async (pb) => {
    const [input, output, dlq, group] = [name('in'), name('out'), name('dlq'), name('g')];
    await pb.bus.createTopics([
      { name: input, partitions: 1 },
      { name: output, partitions: 1 },
      { name: dlq, partitions: 1 },
    ]);
    const p = await pb.bus.producer();
    await p.send([{ topic: input, key: 'bad', value: new Uint8Array([0xff, 0xfe, 0xfd]) }]);
    for (let batch = 0; batch < 3; batch++) {
      await p.send(
        Array.from({ length: 10 }, (_, i) => ({
          topic: input,
          key: `k${i}`,
          value: bytes(`v${batch * 10 + i}`),
        })),
      );
    }
    await run(pb.bus, {
      pattern: 'durable',
      handler: 'echo',
      inputs: [input],
      outputs: [output],
      group,
      codec: 'string',
      batchSizeMax: 10,
      deadLetterTopic: dlq,
    });
    outputsOnce(await waitForRecords(pb.bus, output, 30), 30);
    const dead = await readTopic(pb.bus, dlq);
    assert.is(dead.length, 1, 'the bad record is dead-lettered exactly once');
    assert.equal([...dead[0].value!], [0xff, 0xfe, 0xfd]);
    assert.ok(dead[0].headers.error, 'with the decode error');
  });

  it(PATTERNS.pubsub, async (pb) => {
    const topic = name('ps');
    await pb.bus.createTopics([{ name: topic, partitions: 3 }]);
    const p = await pb.bus.producer();
    await p.send(
      Array.from({ length: 9 }, (_, i) => ({ topic, key: `k${i}`, value: bytes(`old${i}`) })),
    );
    const log = logFile();
    const seen = (): string[] => readLog(log).map((l) => String(l.value));
    await run(pb.bus, {
      pattern: 'pubsub',
      handler: 'log-records',
      inputs: [topic],
      codec: 'string',
      settings: { logFile: log },
    });
    await p.send(
      Array.from({ length: 9 }, (_, i) => ({ topic, key: `k${i}`, value: bytes(`new${i}`) })),
    );
    const deadline = Date.now() + 10_000;
    while (seen().length < 9 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(seen().sort(), Array.from({ length: 9 }, (_, i) => `new${i}`).sort());
  });

  it(PATTERNS.compacted, async (pb) => {
    const topic = name('cmp');
    await pb.bus.createTopics([{ name: topic, partitions: 2, compacted: true }]);
    const p = await pb.bus.producer();
    const put = (key: string, value: string | null) =>
      p.send([{ topic, key, value: value === null ? null : bytes(value) }]);
    for (const [k, v] of [
      ['a', '1'],
      ['b', '1'],
      ['a', '2'],
      ['b', null],
      ['c', '1'],
      ['d', '1'],
      ['d', null],
    ] as const)
      await put(k, v);
    // The handler logs {snapshot} once, then {key, previous, value} per record.
    const start = async (): Promise<{
      snapshot: Record<string, string>;
      events: () => string[];
    }> => {
      const log = logFile();
      const sub = await run(pb.bus, {
        pattern: 'compacted',
        handler: 'log-records',
        inputs: [topic],
        codec: 'string',
        settings: { logFile: log },
      });
      const [first] = readLog(log);
      return {
        snapshot: first?.snapshot as Record<string, string>,
        events: () =>
          readLog(log)
            .slice(1)
            .map((l) => `${l.key}:${l.previous}->${l.value}`),
        ...{ sub },
      };
    };
    const one = await start();
    assert.equal(one.snapshot, { a: '2', c: '1' }, 'latest value per key; deleted keys absent');
    await put('c', null);
    await put('a', '3');
    await put('e', '1');
    const deadline = Date.now() + 10_000;
    while (one.events().length < 3 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    assert.equal(
      one.events().sort(),
      ['a:2->3', 'c:1->null', 'e:null->1'],
      'each new record with the previous value',
    );
    for (const r of running.splice(0)) await r.stop();
    assert.equal((await start()).snapshot, { a: '3', e: '1' }, 'a restart rebuilds the same map');
  });

  it(PATTERNS.sae, async (pb) => {
    const [ev, st, out, group] = [name('ev'), name('st'), name('out'), name('g')];
    await pb.bus.createTopics([
      { name: ev, partitions: 2 },
      { name: st, partitions: 2, compacted: true },
      { name: out, partitions: 2 },
    ]);
    const p = await pb.bus.producer();
    const num = jsonCodec<number>();
    await p.send([
      { topic: st, key: 'acct', value: num.encode(5) },
      { topic: ev, key: 'acct', value: num.encode(1) },
      { topic: ev, key: 'acct', value: num.encode(10) },
    ]);
    await run(pb.bus, {
      pattern: 'state-and-event',
      handler: 'balance',
      inputs: [ev],
      outputs: [out],
      stateTopic: st,
      group,
      codec: 'json',
    });
    assert.equal((await waitForRecords(pb.bus, out, 2)).map(text), ['5+1=6', '6+10=16']);
    const states = (await readTopic(pb.bus, st)).map((r) => num.decode(r.value!));
    assert.equal(states, [5, 6, 16], 'each new state committed once');
  });

  it(PATTERNS.rpc, async (pb) => {
    const [req, resp] = [name('req'), name('resp')];
    await pb.bus.createTopics([
      { name: req, partitions: 3 },
      { name: resp, partitions: 3 },
    ]);
    // The responder is a processor (library or actor); the sender stays a library call.
    const responder = await run(pb.bus, {
      pattern: 'rpc',
      handler: 'upper',
      inputs: [req],
      outputs: [resp],
      codec: 'string',
    });
    const sender = track(
      startRpcSender({
        bus: pb.bus,
        requestTopic: req,
        responseTopic: resp,
        requestCodec: stringCodec,
        responseCodec: stringCodec,
        timeoutMs: 5000,
      }),
    );
    await sender.ready;
    assert.is(await sender.send('hi', { partition: 2 }), 'HI');
    const responses = await readTopic(pb.bus, resp);
    assert.equal(
      responses.map((r) => [r.partition, text(r)]),
      [[2, 'HI']],
      'the response is on the request partition',
    );
    const slow = await sender.send('slow', { timeoutMs: 200 }).then(
      () => null,
      (e: Error) => e,
    );
    assert.instance(slow, RpcTimeoutError, 'a slow response surfaces as a timeout');
    const boom = await sender.send('boom').then(
      () => null,
      (e: Error) => e,
    );
    assert.instance(boom, RpcRemoteError);
    assert.is(boom!.message, 'boom failed');
    const deadline = Date.now() + 5000;
    while (sender.stats.lateResponses < 1 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    assert.is(
      sender.stats.lateResponses,
      1,
      'the late response is dropped, not given to another request',
    );
    await responder.stop();
    const lost = await sender.send('nobody', { timeoutMs: 300 }).then(
      () => null,
      (e: Error) => e,
    );
    assert.instance(lost, RpcTimeoutError, 'a request nobody answers times out, never hangs');
  });

  it(PATTERNS.p4, async (pb) => {
    const [ev, st, out, group] = [name('ev'), name('st'), name('out'), name('g')];
    await pb.bus.createTopics([
      { name: ev, partitions: 2 },
      { name: st, partitions: 2, compacted: true },
      { name: out, partitions: 2 },
    ]);
    const p = await pb.bus.producer();
    const num = jsonCodec<number>();
    // 1000 states in each partition (keys p<partition>-<i>): whichever partition moves, it has them.
    for (const part of [0, 1]) {
      for (let i = 0; i < 1000; i += 250)
        await p.send(
          Array.from({ length: 250 }, (_, j) => ({
            topic: st,
            key: `p${part}-${i + j}`,
            value: num.encode(i + j),
            partition: part,
          })),
        );
    }
    // B (a plain member) holds both partitions, then one of them while A starts; it leaves when A
    // is busy with a slow event on A's first partition, so B's partition moves to A mid-event.
    const b = await pb.bus.consumer({
      groupId: group,
      clientId: 'zz-holder',
      sessionTimeoutMs: opts.sessionTimeoutMs,
    });
    await b.subscribe([ev]);
    while (b.assignment().length < 2) await b.poll({ timeoutMs: 50 });
    const bStopped = { value: false };
    let log: () => string[];
    let bLeaves: Promise<void>;
    let aFirst: Promise<number>;
    /** Actor mode: A's start (resolves when the actor is live), awaited once B polls. */
    let aStarted: Promise<unknown> = Promise.resolve();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_p4-'));
    if (runner.mode === 'actor') {
      // A is a processor actor whose handler (test/fixtures/processors/sae-log.ts) logs the
      // listener's `synced <partition> <states>` and each event to a file, and signals the slow
      // event through another file (then B leaves).
      const [logPath, signalFile] = [path.join(dir, 'log.txt'), path.join(dir, 'slow')];
      log = () =>
        (fs.existsSync(logPath) ? fs.readFileSync(logPath, 'utf8').split('\n') : []).filter(
          (l) => l.length > 0,
        );
      aStarted = run(pb.bus, {
        pattern: 'state-and-event',
        handler: 'sae-log',
        inputs: [ev],
        outputs: [out],
        stateTopic: st,
        group,
        codec: 'json',
        settings: { logFile: logPath, signalFile, slowMs: 300 },
      });
      const failed = aStarted.then(
        () => new Promise<never>(() => {}),
        (e: unknown) => Promise.reject(e as Error),
      );
      bLeaves = Promise.race([waitForFile(signalFile, timeoutMs), failed]);
      aFirst = Promise.race([
        (async () => {
          for (;;) {
            const synced = log().find((l) => l.startsWith('synced '));
            if (synced) return Number(synced.split(' ')[1]);
            await new Promise((r) => setTimeout(r, 20));
          }
        })(),
        failed,
      ]);
      bLeaves.catch(() => {});
      aFirst.catch(() => {});
    } else {
      const lines: string[] = [];
      log = () => lines;
      let releaseB!: () => void;
      bLeaves = new Promise<void>((r) => (releaseB = r));
      let firstSynced!: (partition: number) => void;
      aFirst = new Promise<number>((r) => (firstSynced = r));
      const a = track(
        startStateAndEvent({
          bus: pb.bus,
          groupId: group,
          eventTopic: ev,
          stateTopic: st,
          transactionalId: name('tx'),
          eventCodec: num,
          stateCodec: num,
          sessionTimeoutMs: opts.sessionTimeoutMs,
          listener: {
            onPartitionSynced: (partition, states) => {
              lines.push(`synced ${partition} ${states.size}`);
              firstSynced(partition);
            },
          },
          processor: {
            onNext: async (state, event) => {
              if (event.key === 'slow') {
                releaseB();
                await new Promise((r) => setTimeout(r, 300));
              }
              lines.push(`event ${event.partition} ${event.key} state=${state}`);
              return { outputs: [{ topic: out, key: event.key, value: bytes(`${event.key}`) }] };
            },
          },
        }),
      );
      a.done.catch((e: unknown) => void lines.push(`A failed: ${String(e)}`));
    }
    // B polls (as a live member does) until it is told to leave, or its consumer is closed.
    const bPolls = (async () => {
      while (
        !bStopped.value &&
        !(await Promise.race([
          bLeaves.then(() => true),
          b.poll({ timeoutMs: 50 }).then(
            () => false,
            () => true,
          ),
        ]))
      );
      await b.close();
    })();
    try {
      const mine = await aFirst;
      await aStarted;
      const moved = 1 - mine;
      await p.send([{ topic: ev, key: 'slow', value: num.encode(0), partition: mine }]);
      await bLeaves;
      await p.send(
        Array.from({ length: 10 }, (_, i) => ({
          topic: ev,
          key: `p${moved}-${i * 100}`,
          value: num.encode(1),
          partition: moved,
        })),
      );
      const got = await waitForRecords(pb.bus, out, 11);
      await bPolls;
      const lines = log();
      assert.is(got.length, 11, `each event processed once: ${lines.join(' | ')}`);
      const synced = lines.indexOf(`synced ${moved} 1000`);
      const first = lines.findIndex((l) => l.startsWith(`event ${moved} `));
      assert.ok(
        synced >= 0 && synced < first,
        `partition ${moved} synced with all 1000 states before its first event: ${lines.slice(0, 6).join(' | ')}`,
      );
      assert.ok(
        lines
          .filter((l) => l.startsWith(`event ${moved} `))
          .every((l) => !l.endsWith('state=null')),
        `every event of partition ${moved} sees its state`,
      );
    } finally {
      bStopped.value = true;
      await bPolls;
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  if (opts.after) s.after(opts.after);
  s.run();
}
