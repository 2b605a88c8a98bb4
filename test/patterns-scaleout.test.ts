/**
 * Scale-out of the durable pattern on the Kafka backend (issue 4), on a real Kafka broker
 * (testing/kafka-broker.ts): two processes of examples/patterns/durable-kafka.ts in one consumer
 * group split the partitions of the input topic; one is killed with SIGKILL mid-stream (possibly
 * mid-transaction); the survivor takes its partitions over; nothing is lost, no input has two
 * outputs visible to a read_committed reader, and each key's outputs keep their input order.
 *
 * The scenario runs once (before the tests); each test asserts one guarantee on what it recorded:
 * the children's stdout events (assigned/revoked/batch/committed, see the example) and every
 * record of the output topic, read from the beginning by a read_committed reader.
 *
 * kafkajs sends TxnOffsetCommit without member id and generation (no KIP-447), so the group
 * coordinator cannot refuse a zombie's offsets; the example's 'partition' fencing (one
 * transactional producer per input partition) is what makes the takeover exactly once here: the
 * survivor's InitProducerId for a taken-over partition aborts the killed process's open
 * transaction and waits for its last commit to complete before the committed offset is read.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import {
  createKafkaBus,
  partitionForKey,
  type BusBackend,
  type BusConsumer,
  type BusProducer,
  type ConsumedRecord,
} from '../engine/bus/index.js';
import { testKafka, type TestKafka } from '../testing/kafka-broker.js';
import { invoiceCodec, orderCodec, type Invoice } from '../examples/patterns/durable-kafka.js';

const PARTITIONS = 6;
const SESSION_TIMEOUT_MS = 3000;
/** Names of this run's own (the broker may be shared with other test files). */
const RUN = `${process.pid}-${Math.random().toString(36).slice(2, 7)}`;
const INPUT = `orders-${RUN}`;
const OUTPUT = `invoices-${RUN}`;
const GROUP = `billing-${RUN}`;
/** Bound of every wait of the scenario, ms. */
const WAIT_MS = 30_000;
/** The live producer's pace: one order per customer every this many ms, at most LIVE_INPUTS_MAX in all. */
const LIVE_INTERVAL_MS = 100;
const LIVE_INPUTS_MAX = 3000;
const ALL = Array.from({ length: PARTITIONS }, (_, p) => p);
/** Two customers (keys) per input partition, so every partition has input and every owner work. */
const CUSTOMER_NAMES = ((): string[] => {
  const perPartition = ALL.map((): string[] => []);
  for (let c = 0; perPartition.some((l) => l.length < 2); c++) {
    const l = perPartition[partitionForKey(`c${c}`, PARTITIONS)];
    if (l.length < 2) l.push(`c${c}`);
  }
  return perPartition.flat();
})();
const CUSTOMERS = CUSTOMER_NAMES.length;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(
  cond: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = WAIT_MS,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(50);
  }
}

type ChildEvent = {
  event: string;
  n?: number;
  records?: number;
  partitions?: number[];
  committed?: (number | null)[];
  stats?: Record<string, number>;
};

/** One billing process (node dist/examples/patterns/durable-kafka.js) and the events it printed. */
class Billing {
  readonly proc: ChildProcess;
  readonly events: ChildEvent[] = [];
  readonly exited: Promise<{ code: number | null; signal: string | null }>;

  constructor(
    readonly instance: string,
    brokers: string[],
  ) {
    const program = fileURLToPath(
      new URL('../examples/patterns/durable-kafka.js', import.meta.url),
    );
    this.proc = spawn(
      process.execPath,
      [
        program,
        '--brokers',
        brokers.join(','),
        '--group',
        GROUP,
        '--instance',
        instance,
        '--input',
        INPUT,
        '--output',
        OUTPUT,
        '--session-timeout-ms',
        String(SESSION_TIMEOUT_MS),
        '--log-level',
        process.env.SLUICE_TEST_KAFKA_LOG ?? 'NOTHING',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    createInterface({ input: this.proc.stdout! }).on('line', (line) => {
      if (process.env.SLUICE_TEST_VERBOSE) process.stderr.write(`[${instance}] ${line}\n`);
      this.events.push(JSON.parse(line) as ChildEvent);
    });
    createInterface({ input: this.proc.stderr! }).on('line', (line) =>
      process.stderr.write(`[${instance}] ${line}\n`),
    );
    this.exited = new Promise((r) => this.proc.on('exit', (code, signal) => r({ code, signal })));
  }

  /** Partitions held after the events printed so far. */
  assignment(): number[] {
    const held = new Set<number>();
    for (const e of this.events) {
      if (e.event === 'assigned') e.partitions!.forEach((p) => held.add(p));
      if (e.event === 'revoked') e.partitions!.forEach((p) => held.delete(p));
    }
    return [...held].sort((a, b) => a - b);
  }

  batches(): number {
    return this.events.filter((e) => e.event === 'batch').length;
  }

  records(): number {
    return this.events.reduce((n, e) => n + (e.event === 'batch' ? e.records! : 0), 0);
  }
}

/** An input as produced: its id and per-customer sequence number. */
interface Input {
  id: string;
  customer: string;
  seq: number;
}
/** An output record of the invoice topic with what its headers say. */
interface Output {
  partition: number;
  offset: number;
  invoice: Invoice;
  source: string;
  batch: string;
}
/** One stretch of ownership of an input partition by one process, from an `assigned` event. */
interface Tenure {
  id: string;
  instance: string;
  partition: number;
  committed: number | null;
}

/** What the scenario recorded; the tests read it. */
interface Run {
  inputs: Map<string, Input>;
  outputs: Output[];
  split: { a: number[]; b: number[] };
  killedHeld: number[];
  survivorAfter: number[];
  lastAssignedOfSurvivor: number[];
  batchOutcome: Map<string, 'committed' | 'failed' | 'unknown'>;
  /** batch id -> input partition -> tenure, as it was when the batch was handed to the processor. */
  batchTenures: Map<string, Map<number, Tenure>>;
  finalCommitted: (number | null)[];
  survivorExit: { code: number | null; signal: string | null };
  killedExit: { code: number | null; signal: string | null };
  survivorStats: Record<string, number> | undefined;
}

function tenures(child: Billing, run: Pick<Run, 'batchOutcome' | 'batchTenures'>): void {
  const current = new Map<number, Tenure>();
  let count = 0;
  for (const e of child.events) {
    if (e.event === 'assigned')
      e.partitions!.forEach((p, i) =>
        current.set(p, {
          id: `${child.instance}#${++count}`,
          instance: child.instance,
          partition: p,
          committed: e.committed![i],
        }),
      );
    if (e.event === 'revoked') e.partitions!.forEach((p) => current.delete(p));
    if (e.event === 'batch') {
      run.batchTenures.set(`${child.instance}:${e.n}`, new Map(current));
      run.batchOutcome.set(`${child.instance}:${e.n}`, 'unknown');
    }
    if (e.event === 'committed' || e.event === 'failed')
      run.batchOutcome.set(`${child.instance}:${e.n}`, e.event);
  }
}

async function scenario(kafka: TestKafka, bus: BusBackend): Promise<Run> {
  const producer: BusProducer = await bus.producer();
  const inputs = new Map<string, Input>();
  const nextSeq = new Map<string, number>();
  const produce = async (perCustomer: number): Promise<void> => {
    const batch: Input[] = [];
    for (let k = 0; k < perCustomer; k++) {
      for (let c = 0; c < CUSTOMERS; c++) {
        const customer = CUSTOMER_NAMES[c];
        const seq = nextSeq.get(customer) ?? 0;
        nextSeq.set(customer, seq + 1);
        batch.push({ id: `${customer}:${seq}`, customer, seq });
      }
    }
    const meta = await producer.send(
      batch.map((i) => ({
        topic: INPUT,
        key: i.customer,
        value: orderCodec.encode({ id: i.id, customer: i.customer, amountCents: 100 + i.seq }),
      })),
    );
    meta.forEach((m, i) => inputs.set(`${INPUT}:${m.partition}:${m.offset}`, batch[i]));
  };

  // The reader: what a read_committed consumer of the output sees, from the beginning.
  const outputs: Output[] = [];
  const reader: BusConsumer = await bus.consumer();
  const outTps = ALL.map((partition) => ({ topic: OUTPUT, partition }));
  await reader.assign(outTps);
  await reader.seekToBeginning(outTps);
  let reading = true;
  const readLoop = (async () => {
    while (reading) {
      for (const r of await reader.poll({ timeoutMs: 100 })) outputs.push(toOutput(r));
    }
  })();
  const covered = (): boolean => {
    const seen = new Set(outputs.map((o) => `${o.source}=${o.invoice.orderId}`));
    return [...inputs].every(([source, i]) => seen.has(`${source}=${i.id}`));
  };

  const children: Billing[] = [];
  try {
    await produce(10);
    const a = new Billing('a', kafka.brokers);
    children.push(a);
    await until(
      () => a.assignment().length === PARTITIONS,
      'process a alone holds all 6 partitions',
    );
    await until(() => a.records() >= inputs.size, 'process a has read the first inputs');

    const b = new Billing('b', kafka.brokers);
    children.push(b);
    await until(
      () =>
        a.assignment().length > 0 &&
        b.assignment().length > 0 &&
        a.assignment().length + b.assignment().length === PARTITIONS,
      'a and b split the partitions',
    );
    const split = { a: a.assignment(), b: b.assignment() };
    console.log(`  split: a holds [${split.a}], b holds [${split.b}]`);

    let live = true;
    const liveLoop = (async () => {
      while (live && inputs.size < LIVE_INPUTS_MAX) {
        await produce(1);
        await sleep(LIVE_INTERVAL_MS);
      }
    })();
    const [aBatches, bBatches, splitInputs] = [a.batches(), b.batches(), inputs.size];
    await until(
      () =>
        a.batches() >= aBatches + 5 &&
        b.batches() >= bBatches + 5 &&
        inputs.size >= splitInputs + 10 * CUSTOMERS,
      'a and b both process live input',
    );
    const killedHeld = a.assignment();
    a.proc.kill('SIGKILL');
    const killedExit = await a.exited;
    console.log(
      `  kill -9 of a (held [${killedHeld}]) after ${a.batches()} batches, ${inputs.size} inputs produced`,
    );

    await until(
      () => b.assignment().length === PARTITIONS,
      'b, the survivor, holds all 6 partitions',
    );
    const survivorAfter = b.assignment();
    const lastAssignedOfSurvivor = [...b.events]
      .reverse()
      .find((e) => e.event === 'assigned')!.partitions!;
    const takenAt = inputs.size;
    await until(
      () => inputs.size >= takenAt + 10 * CUSTOMERS,
      'more live input after the takeover',
    );
    live = false;
    await liveLoop;
    await produce(10);
    console.log(`  ${inputs.size} inputs produced; waiting for every one's output`);
    // Not fatal: the tests below say which inputs have no output.
    await until(covered, 'every input has an output').catch((e: Error) =>
      console.log(`  ${e.message}`),
    );

    b.proc.kill('SIGTERM');
    const survivorExit = await b.exited;
    const survivorStats = b.events.find((e) => e.event === 'stopped')?.stats;
    // Everything b wrote is readable now: read to the end offsets.
    const ends = await bus.offsets(outTps);
    await until(
      () => outTps.every((tp, i) => reader.position(tp) >= ends[i].end),
      'the reader reached the end of the output',
    );
    reading = false;
    await readLoop;

    const run: Run = {
      inputs,
      outputs,
      split,
      killedHeld,
      survivorAfter,
      lastAssignedOfSurvivor,
      killedExit,
      survivorExit,
      survivorStats,
      batchOutcome: new Map(),
      batchTenures: new Map(),
      finalCommitted: await bus.committed(
        GROUP,
        ALL.map((partition) => ({ topic: INPUT, partition })),
      ),
    };
    for (const c of children) tenures(c, run);
    return run;
  } finally {
    reading = false;
    await readLoop.catch(() => undefined);
    await reader.close();
    await producer.close();
    for (const c of children)
      if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
    await Promise.all(children.map((c) => c.exited));
  }
}

function toOutput(r: ConsumedRecord): Output {
  return {
    partition: r.partition,
    offset: r.offset,
    invoice: invoiceCodec.decode(r.value!),
    source: r.headers.source,
    batch: r.headers.batch,
  };
}

const s = suite('durable pattern scale-out on kafka');
let kafka: TestKafka;
let bus: BusBackend;
let run: Run;

s.before(async () => {
  kafka = await testKafka();
  bus = createKafkaBus({ brokers: kafka.brokers });
  await bus.createTopics([
    { name: INPUT, partitions: PARTITIONS },
    { name: OUTPUT, partitions: PARTITIONS },
  ]);
  // uvu reports a failed hook without its error: print it.
  run = await scenario(kafka, bus).catch((e: Error) => {
    console.error(`scenario failed: ${e.stack}`);
    throw e;
  });
});

s.after(async () => {
  await bus?.close();
  await kafka?.release();
});

/**
 * Committed outputs: every output the read_committed reader got (a broker hides open and aborted
 * transactions; the read_committed test checks that no failed batch shows). Not only batches the
 * writer saw commit: the killed process's last transaction may have committed unreported.
 */
const committedOutputs = (): Output[] => run.outputs;
const tenureOf = (o: Output): Tenure => {
  const t = run.batchTenures.get(o.batch)?.get(Number(o.source.split(':')[1]));
  if (!t)
    throw new Error(
      `output ${o.partition}:${o.offset} of batch ${o.batch} from ${o.source}: the batch's process did not hold that partition`,
    );
  return t;
};

s('two processes in one group split the partitions: disjoint, complete, each holds some', () => {
  assert.ok(
    run.split.a.length > 0 && run.split.b.length > 0,
    `each holds some: a [${run.split.a}], b [${run.split.b}]`,
  );
  assert.equal(
    [...run.split.a, ...run.split.b].sort((x, y) => x - y),
    ALL,
    'every partition held by exactly one process',
  );
});

s('after kill -9 of one process the survivor takes over exactly its partitions', () => {
  assert.is(run.killedExit.signal, 'SIGKILL');
  assert.equal(run.survivorAfter, ALL, 'the survivor holds all 6');
  assert.equal(
    [...run.lastAssignedOfSurvivor].sort((x, y) => x - y),
    run.killedHeld,
    "its last assignment is the killed process's partitions",
  );
  assert.is(run.survivorExit.code, 0, 'the survivor drained and exited 0 on SIGTERM');
  assert.ok(
    run.survivorStats && run.survivorStats.batchesCommitted > 0,
    `the survivor committed batches: ${JSON.stringify(run.survivorStats)}`,
  );
});

s('no input lost: every input has its output in a committed transaction', () => {
  for (const o of run.outputs) {
    const input = run.inputs.get(o.source);
    assert.ok(
      input,
      `output ${o.partition}:${o.offset} names an input that was produced: ${o.source}`,
    );
    assert.is(o.invoice.orderId, input!.id, `the output of ${o.source} is that input's invoice`);
  }
  const committed = new Set(committedOutputs().map((o) => o.source));
  const lost = [...run.inputs].filter(([source]) => !committed.has(source)).map(([, i]) => i.id);
  assert.equal(
    lost.slice(0, 20),
    [],
    `${lost.length} of ${run.inputs.size} inputs have no committed output`,
  );
  console.log(
    `  ${run.inputs.size} inputs, ${run.outputs.length} outputs read, ${committedOutputs().length} of them from committed batches`,
  );
});

s(
  'each owner starts at the committed position, reads its partitions without gap, and outputs each input once, in key order',
  () => {
    const byTenure = new Map<string, { tenure: Tenure; offsets: number[] }>();
    for (const o of committedOutputs()) {
      const t = tenureOf(o);
      let e = byTenure.get(t.id);
      if (!e) byTenure.set(t.id, (e = { tenure: t, offsets: [] }));
      e.offsets.push(Number(o.source.split(':')[2]));
    }
    assert.ok(
      byTenure.size >= PARTITIONS + run.killedHeld.length,
      `tenures with output: ${[...byTenure.keys()]}`,
    );
    for (const { tenure, offsets } of byTenure.values()) {
      offsets.sort((x, y) => x - y);
      const from = tenure.committed ?? 0; // the input topic is fresh: its start offset is 0
      const expected = Array.from(
        { length: offsets[offsets.length - 1] - from + 1 },
        (_, i) => from + i,
      );
      assert.equal(
        offsets,
        expected,
        `${tenure.instance} on partition ${tenure.partition} (committed ${tenure.committed}): inputs from the committed position, each once, no gap`,
      );
    }
    // Per key: every output of a key is in one output partition, in the order it was appended.
    const byKey = new Map<string, Output[]>();
    for (const o of committedOutputs().sort(
      (x, y) => x.partition - y.partition || x.offset - y.offset,
    )) {
      let list = byKey.get(o.invoice.customer);
      if (!list) byKey.set(o.invoice.customer, (list = []));
      list.push(o);
    }
    for (const [customer, list] of byKey) {
      const perTenure = new Map<string, number[]>();
      const firsts: number[] = [];
      const seen = new Set<number>();
      for (const o of list) {
        const seq = run.inputs.get(o.source)!.seq;
        const t = tenureOf(o).id;
        perTenure.set(t, [...(perTenure.get(t) ?? []), seq]);
        if (!seen.has(seq)) (seen.add(seq), firsts.push(seq));
      }
      for (const [t, seqs] of perTenure) {
        assert.ok(
          seqs.every((q, i) => i === 0 || q === seqs[i - 1] + 1),
          `${customer} under ${t}: consecutive, in input order: ${seqs.join(',')}`,
        );
      }
      assert.equal(
        firsts,
        Array.from({ length: firsts.length }, (_, i) => i),
        `${customer}: first outputs in input order`,
      );
    }
  },
);

s('exactly once across the takeover: no input has two committed outputs', () => {
  const copies = new Map<string, Output[]>();
  for (const o of committedOutputs()) copies.set(o.source, [...(copies.get(o.source) ?? []), o]);
  const repeated = [...copies.values()].filter((l) => l.length > 1);
  assert.ok(
    run.finalCommitted.every((c) => c !== null && c > 0),
    `the group's committed offsets moved: ${JSON.stringify(run.finalCommitted)}`,
  );
  assert.equal(
    repeated.map((l) => l[0].source).slice(0, 20),
    [],
    `${repeated.length} inputs have 2+ committed outputs`,
  );
});

s(
  "read_committed never shows an aborted batch, nor any input twice (the killed process's last transaction included)",
  () => {
    const failed = run.outputs.filter((o) => run.batchOutcome.get(o.batch) === 'failed');
    assert.equal(
      failed.map((o) => o.source).slice(0, 20),
      [],
      `${failed.length} outputs of failed (aborted) batches are visible`,
    );
    // Outputs of the killed process's last batches (outcome unknown: killed before it printed) are
    // visible only if that transaction committed; then the survivor must not have repeated them.
    const copies = new Map<string, number>();
    for (const o of run.outputs) copies.set(o.source, (copies.get(o.source) ?? 0) + 1);
    const twice = [...copies].filter(([, n]) => n > 1).map(([source]) => source);
    assert.equal(twice.slice(0, 20), [], `${twice.length} inputs have 2+ visible outputs`);
    const unknown = run.outputs.filter((o) => run.batchOutcome.get(o.batch) === 'unknown').length;
    console.log(
      `  ${unknown} visible outputs from batches whose outcome the killed process did not print (committed just before the kill)`,
    );
  },
);

s.run();
