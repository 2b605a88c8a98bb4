/**
 * The bus conformance suite on the journal backend (a fresh directory per test), plus what only a
 * durable backend has: state surviving a reopen, and whole-or-nothing transactions after kill -9.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import {
  createJournalBus,
  type BusBackend,
  type ConsumedRecord,
  type TopicPartition,
} from '../engine/bus/index.js';
import { busConformance } from './bus-conformance.js';
import { Tailer } from '../engine/journal/index.js';
import { decodeBatch } from '../engine/bus/journal/codec.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bus-journal-'));
let dirSeq = 0;
const freshDir = (): string => path.join(root, `bus-${++dirSeq}`);

busConformance('journal', async () => createJournalBus({ dir: freshDir(), fsync: 'none' }));
// Every record read back from the segment files (a window of 2 offsets, 1 byte in memory), and a
// checkpoint after every write: the same behaviour.
busConformance('journal, cold reads', async () =>
  createJournalBus({
    dir: freshDir(),
    fsync: 'none',
    hotRecordsMax: 2,
    hotBytesMax: 1,
    checkpointBytes: 1,
  }),
);

const dec = new TextDecoder();
const enc = new TextEncoder();

async function readAll(bus: BusBackend, tps: TopicPartition[]): Promise<ConsumedRecord[]> {
  const c = await bus.consumer();
  await c.assign(tps);
  const out: ConsumedRecord[] = [];
  for (;;) {
    const got = await c.poll({ timeoutMs: 0 });
    if (got.length === 0) break;
    out.push(...got);
  }
  await c.close();
  return out;
}

const s = suite('bus journal: durability');

s('records, offsets (markers included) and group positions survive a reopen', async () => {
  const dir = freshDir();
  let bus = await createJournalBus({ dir });
  await bus.createTopics([{ name: 'a', partitions: 2 }]);
  const p = await bus.producer();
  await p.send([{ topic: 'a', key: null, value: enc.encode('plain'), partition: 0 }]);
  const tp = await bus.producer({ transactionalId: 'x' });
  let t = await tp.begin();
  await t.send([{ topic: 'a', key: null, value: enc.encode('aborted'), partition: 0 }]);
  await t.abort();
  t = await tp.begin();
  await t.send([
    { topic: 'a', key: 'k', value: null, partition: 1 },
    { topic: 'a', key: null, value: enc.encode('txn'), partition: 0 },
  ]);
  await t.sendOffsets('g', [{ topic: 'a', partition: 0, offset: 2 }]);
  await t.commit();
  const before = await bus.offsets([
    { topic: 'a', partition: 0 },
    { topic: 'a', partition: 1 },
  ]);
  await bus.close();
  bus = await createJournalBus({ dir });
  assert.is(await bus.partitionCount('a'), 2);
  assert.equal(
    await bus.offsets([
      { topic: 'a', partition: 0 },
      { topic: 'a', partition: 1 },
    ]),
    before,
    'end offsets include markers and the aborted gap',
  );
  assert.equal(await bus.committed('g', [{ topic: 'a', partition: 0 }]), [2]);
  const got = await readAll(bus, [
    { topic: 'a', partition: 0 },
    { topic: 'a', partition: 1 },
  ]);
  assert.equal(
    got.filter((r) => r.partition === 0).map((r) => [r.offset, dec.decode(r.value!)]),
    [
      [0, 'plain'],
      [3, 'txn'],
    ],
  );
  assert.equal(
    got.filter((r) => r.partition === 1).map((r) => [r.key, r.value]),
    [['k', null]],
    'tombstone stays null',
  );
  const q = await bus.producer();
  const after = await q.send([{ topic: 'a', key: null, value: enc.encode('next'), partition: 0 }]);
  assert.is(after[0].offset, before[0].end, 'new records go after the recovered end');
  await bus.close();
});

s(
  'a transaction committed after a later send keeps its earlier offsets across a reopen',
  async () => {
    const dir = freshDir();
    let bus = await createJournalBus({ dir });
    await bus.createTopics([{ name: 'a', partitions: 1 }]);
    const t = await (await bus.producer({ transactionalId: 'x' })).begin();
    await t.send([{ topic: 'a', key: null, value: enc.encode('txn'), partition: 0 }]);
    await (
      await bus.producer()
    ).send([{ topic: 'a', key: null, value: enc.encode('plain'), partition: 0 }]);
    await t.commit();
    const before = (await readAll(bus, [{ topic: 'a', partition: 0 }])).map((r) => [
      r.offset,
      dec.decode(r.value!),
    ]);
    assert.equal(before, [
      [0, 'txn'],
      [1, 'plain'],
    ]);
    await bus.close();
    bus = await createJournalBus({ dir });
    assert.equal(
      (await readAll(bus, [{ topic: 'a', partition: 0 }])).map((r) => [
        r.offset,
        dec.decode(r.value!),
      ]),
      before,
      'the log holds them in commit order: plain first',
    );
    await bus.close();
  },
);

s(
  'values read back after a reopen stay intact when the queues hold more than one tailer read buffer',
  async () => {
    const dir = freshDir();
    let bus = await createJournalBus({ dir, fsync: 'none' });
    await bus.createTopics([{ name: 'a', partitions: 1 }]);
    const p = await bus.producer();
    const value = (i: number): string =>
      `value-${i}-`.padEnd(200, String.fromCharCode(97 + (i % 26)));
    // 3 MiB of records: recovery reads each queue through a 1 MiB buffer it refills.
    for (let i = 0; i < 15_000; i += 1000)
      await p.send(
        Array.from({ length: 1000 }, (_, j) => ({
          topic: 'a',
          key: null,
          value: enc.encode(value(i + j)),
          partition: 0,
        })),
      );
    await bus.close();
    bus = await createJournalBus({ dir, fsync: 'none' });
    const got = await readAll(bus, [{ topic: 'a', partition: 0 }]);
    assert.is(got.length, 15_000);
    got.forEach((r, i) => {
      if (dec.decode(r.value!) !== value(i))
        assert.is(dec.decode(r.value!), value(i), `record ${i}`);
    });
    await bus.close();
  },
);

/** Runs the child until it dies; returns the last k it reported committed (-1 if none). */
function runChild(
  dir: string,
  faultAfter: number,
  fault: string,
  killAfterMs: number | null,
  checkpointBytes?: number,
  /** Where killAfterMs counts from: the spawn, or the child's first reported commit. */
  killFrom: 'spawn' | 'first-commit' = 'spawn',
): Promise<{ last: number; signal: string | null }> {
  const args = [
    fileURLToPath(new URL('./bus-journal-crash.child.js', import.meta.url)),
    dir,
    String(faultAfter),
    fault,
  ];
  if (checkpointBytes !== undefined) args.push(String(checkpointBytes));
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  let timer: NodeJS.Timeout | undefined;
  const arm = () => (timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs ?? 10_000));
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
    if (timer === undefined && killFrom === 'first-commit' && out.includes('committed ')) arm();
  });
  if (killFrom === 'spawn' || killAfterMs === null) arm();
  return new Promise((resolve) => {
    child.on('exit', (_code, signal) => {
      clearTimeout(timer);
      const lines = out
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('committed '));
      resolve({ last: lines.length ? Number(lines[lines.length - 1].split(' ')[1]) : -1, signal });
    });
  });
}

/** Checks the whole-or-nothing invariant; returns the number of committed transactions. */
async function checkWhole(dir: string): Promise<number> {
  const bus = await createJournalBus({ dir });
  try {
    const got = await readAll(bus, [
      { topic: 'out', partition: 0 },
      { topic: 'out', partition: 1 },
    ]);
    const count = new Map<string, number[]>();
    for (const r of got) {
      const v = dec.decode(r.value!);
      const c = count.get(v) ?? [0, 0];
      c[r.partition]++;
      count.set(v, c);
    }
    const committed = (await bus.committed('g', [{ topic: 'in', partition: 0 }]))[0] ?? 0;
    assert.is(count.size, committed, 'one committed position per visible transaction');
    for (let k = 0; k < committed; k++)
      assert.equal(count.get(`t${k}`), [3, 3], `transaction t${k} whole in both partitions`);
    return committed;
  } finally {
    await bus.close();
  }
}

s(
  'kill -9 inside a commit: after reopening, each transaction is visible whole or not at all',
  async () => {
    const dir = freshDir();
    // Deterministic kills at both points inside the commit, then kills at random times.
    let r = await runChild(dir, 5, 'after-txn-log', null);
    assert.is(r.signal, 'SIGKILL');
    assert.is(r.last, 4);
    assert.is(await checkWhole(dir), 6, 'the logged transaction is redone on recovery');
    r = await runChild(dir, 3, 'after-first-partition', null);
    assert.is(r.last, 8);
    assert.is(
      await checkWhole(dir),
      10,
      'a transaction on one of two partitions is completed on recovery',
    );
    let before = 10;
    for (const ms of [400, 550, 700]) {
      r = await runChild(dir, -1, '-', ms);
      const n = await checkWhole(dir);
      // The child may die before its first commit (startup) or between a commit and its report.
      assert.ok(
        n >= Math.max(before, r.last + 1) && n <= Math.max(before, r.last + 2),
        `reported committed ${r.last} -> ${n} visible (before: ${before})`,
      );
      before = n;
    }
  },
);

s(
  'kill -9 in a checkpoint and at random times while the log is truncated: each transaction whole or not at all',
  async () => {
    const dir = freshDir();
    // A checkpoint after every commit, 4 KiB segments: the log loses segments all the time.
    let r = await runChild(dir, 5, 'after-checkpoint-file', null, 1);
    assert.is(r.signal, 'SIGKILL');
    assert.is(
      await checkWhole(dir),
      6,
      'the checkpoint covered the sixth commit; its log segments are still there',
    );
    let before = 6;
    // Counted from each child's first commit: from the spawn, a slow machine's children were
    // still starting at 2.5 s and committed nothing.
    for (const ms of [500, 1000, 1500]) {
      r = await runChild(dir, -1, '-', ms, 1, 'first-commit');
      const n = await checkWhole(dir);
      assert.ok(
        n >= Math.max(before, r.last + 1) && n <= Math.max(before, r.last + 2),
        `reported committed ${r.last} -> ${n} visible (before: ${before})`,
      );
      before = n;
    }
    assert.ok(before > 6, `the children committed more transactions: ${before}`);
    const logSegments = fs
      .readdirSync(path.join(dir, 'txn'))
      .filter((f) => f.endsWith('.seg')).length;
    assert.ok(logSegments <= 2, `the transaction log keeps at most 2 segments, has ${logSegments}`);
  },
);

s(
  'a partition batch whose transaction-log entry never reached the disk is skipped on recovery, and stays skipped',
  async () => {
    const dir = freshDir();
    // Transaction t5's batches reach both partition files, its log entry never does (what a power
    // loss can leave: partition queues are not synced before the log).
    const r = await runChild(dir, 5, 'partitions-before-txn-log', null);
    assert.is(r.signal, 'SIGKILL');
    assert.is(r.last, 4);
    const orphan = (): number => {
      let n = 0;
      for (const partition of [0, 1]) {
        const t = Tailer.open({ dir: path.join(dir, 't', 'out', String(partition)) });
        for (let rec = t.next(); rec !== null; rec = t.next()) {
          const batch = decodeBatch(rec.bytes.slice(), 'test');
          if (batch.records.some((x) => dec.decode(x.record.value!) === 't5') && batch.seq === 6)
            n++;
        }
        t.close();
      }
      return n;
    };
    assert.is(orphan(), 2, 'the fault left t5 (seq 6) in both partition files');
    assert.is(await checkWhole(dir), 5, 't5 is not visible: its log entry is missing');
    // New transactions reuse t5's offsets under higher seqs; the orphan stays in the files, skipped.
    const again = await runChild(dir, 4, 'after-txn-log', null);
    assert.is(again.last, 8);
    assert.is(orphan(), 2, 'the orphan batch is still in the partition files');
    assert.is(
      await checkWhole(dir),
      10,
      't5..t9 committed after recovery, each whole, the orphan never visible',
    );
  },
);

s.after(() => {
  if (!process.env.KEEP) fs.rmSync(root, { recursive: true, force: true });
});
s(
  'committed offsets are stable: a read while a transaction commits offsets waits for its sync (KIP-447 require_stable), so a member taking the partition over starts after it',
  async () => {
    const bus = await createJournalBus({ dir: freshDir(), fsync: 'batch' });
    try {
      await bus.createTopics([
        { name: 'in', partitions: 1 },
        { name: 'out', partitions: 1 },
      ]);
      const p = await bus.producer({ transactionalId: 'stable' });
      const t = await p.begin();
      await t.send([{ topic: 'out', key: 'k', value: enc.encode('o'), partition: 0 }]);
      await t.sendOffsets('g', [{ topic: 'in', partition: 0, offset: 7 }]);
      // commit() runs to its store sync; the read comes while the sync is pending.
      const committing = t.commit();
      const read = bus.committed('g', [{ topic: 'in', partition: 0 }]);
      await committing;
      assert.equal(await read, [7], 'not the offset before the commit (null)');
      // A consumer of the group starts there too.
      const c = await bus.consumer({ groupId: 'g' });
      await c.subscribe(['in']);
      for (let i = 0; i < 50 && c.assignment().length === 0; i++) await c.poll({ timeoutMs: 20 });
      assert.is(c.position({ topic: 'in', partition: 0 }), 7);
      await c.close();
      await p.close();
    } finally {
      await bus.close();
    }
  },
);

s.run();
