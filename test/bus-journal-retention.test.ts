/**
 * Retention and log compaction on the journal bus: segments deleted whole by size and age, never
 * under a consumer group's committed position unless configured; compacted topics keep each
 * key's latest value at its offset, tombstones for a configured time; a kill -9 in the middle
 * of a compaction leaves every key's latest value exactly once.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import {
  BusError,
  createJournalBus,
  type BusBackend,
  type ConsumedRecord,
  type JournalBus,
} from '../engine/bus/index.js';
import { listSegments } from '../engine/journal/index.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bus-retention-'));
let dirSeq = 0;
const freshDir = (): string => path.join(root, `bus-${++dirSeq}`);
const enc = new TextEncoder();
const dec = new TextDecoder();
/** Small segments so a few hundred records make many; no timed maintenance. */
const small = {
  fsync: 'none',
  segmentBytes: 4096,
  maintenanceIntervalMs: 0,
  hotRecordsMax: 16,
} as const;

async function readAll(bus: BusBackend, topic: string, partition = 0): Promise<ConsumedRecord[]> {
  const c = await bus.consumer();
  await c.assign([{ topic, partition }]);
  const out: ConsumedRecord[] = [];
  for (;;) {
    const got = await c.poll({ timeoutMs: 0 });
    if (got.length === 0) break;
    out.push(...got);
  }
  await c.close();
  return out;
}

async function sendN(
  bus: BusBackend,
  topic: string,
  from: number,
  n: number,
  key: (i: number) => string | null = () => null,
): Promise<void> {
  const p = await bus.producer();
  for (let i = from; i < from + n; i += 10) {
    await p.send(
      Array.from({ length: Math.min(10, from + n - i) }, (_, j) => ({
        topic,
        key: key(i + j),
        value: enc.encode(`v${i + j}`.padEnd(100, '.')),
        partition: 0,
      })),
    );
  }
  await p.close();
}

const partitionDir = (dir: string, topic: string): string => path.join(dir, 't', topic, '0');

function dirBytes(dir: string): number {
  return fs
    .readdirSync(dir)
    .filter((f) => /\.(seg|idx)$/.test(f))
    .reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
}

const r = suite('journal bus retention');

r(
  'by size: the oldest segments go whole until the partition fits bytesMax; later offsets are unchanged',
  async () => {
    const dir = freshDir();
    const bus = await createJournalBus({ dir, ...small });
    await bus.createTopics([{ name: 'logs', partitions: 1, retention: { bytesMax: 16 * 1024 } }]);
    await sendN(bus, 'logs', 0, 1000);
    const before = listSegments(partitionDir(dir, 'logs')).length;
    const report = bus.maintain();
    const after = listSegments(partitionDir(dir, 'logs'));
    assert.ok(before > 20, `${before} segments before`);
    assert.is(report.segmentsDeleted, before - after.length);
    assert.ok(dirBytes(partitionDir(dir, 'logs')) <= 16 * 1024, 'the partition fits bytesMax');
    const got = await readAll(bus, 'logs');
    const [{ start, end }] = await bus.offsets([{ topic: 'logs', partition: 0 }]);
    assert.is(end, 1000);
    assert.is(got[0].offset, start, 'reading from the start begins at the first kept record');
    assert.is(got[got.length - 1].offset, 999);
    got.forEach((x) =>
      assert.is(
        dec.decode(x.value!).split('.')[0],
        `v${x.offset}`,
        `offset ${x.offset} keeps its value`,
      ),
    );
    assert.is(
      got.length,
      1000 - start,
      'every record from the start offset on, none lost in between',
    );
    await bus.close();
    // And the same after a reopen.
    const again = await createJournalBus({ dir, ...small });
    assert.equal(await again.offsets([{ topic: 'logs', partition: 0 }]), [{ start, end }]);
    assert.is((await readAll(again, 'logs')).length, 1000 - start);
    await again.close();
  },
);

r('by age: segments sealed longer ago than ageMsMax go, younger ones stay', async () => {
  const dir = freshDir();
  const bus = await createJournalBus({ dir, ...small });
  await bus.createTopics([{ name: 'aged', partitions: 1, retention: { ageMsMax: 60_000 } }]);
  await sendN(bus, 'aged', 0, 300);
  assert.equal(
    bus.maintain(),
    { segmentsDeleted: 0, segmentsCompacted: 0, recordsRemoved: 0, partitionsOverKeysMax: [] },
    'nothing is a minute old yet',
  );
  const segs = listSegments(partitionDir(dir, 'aged'));
  const report = bus.maintain(Date.now() + 120_000);
  assert.is(
    report.segmentsDeleted,
    segs.length - 1,
    'every sealed segment is two minutes old; the active one stays',
  );
  assert.equal(listSegments(partitionDir(dir, 'aged')), [segs[segs.length - 1]]);
  const got = await readAll(bus, 'aged');
  assert.ok(got.length > 0 && got[got.length - 1].offset === 299, 'the active segment still reads');
  await bus.close();
});

r(
  "a segment at or above a group's committed position is kept, unless deleteUncommitted",
  async () => {
    for (const deleteUncommitted of [false, true]) {
      const dir = freshDir();
      const bus = await createJournalBus({ dir, ...small });
      await bus.createTopics([
        { name: 'held', partitions: 1, retention: { bytesMax: 0, deleteUncommitted } },
      ]);
      await sendN(bus, 'held', 0, 600);
      const c = await bus.consumer({ groupId: 'slow' });
      await c.assign([{ topic: 'held', partition: 0 }]);
      await c.commit([{ topic: 'held', partition: 0, offset: 100 }]);
      bus.maintain();
      const got = await readAll(bus, 'held');
      if (deleteUncommitted) {
        assert.ok(
          got[0].offset > 100,
          `deleteUncommitted: records below and above the group's position go (first kept ${got[0].offset})`,
        );
      } else {
        assert.ok(
          got[0].offset <= 100,
          `the group's next record 100 is kept (first kept ${got[0].offset})`,
        );
        assert.ok(got[0].offset > 0, 'segments wholly below the position are deleted');
        await c.commit([{ topic: 'held', partition: 0, offset: 600 }]);
        bus.maintain();
        const rest = await readAll(bus, 'held');
        assert.ok(rest[0].offset > 100, 'once the group moves on, its old segments go too');
      }
      await bus.close();
    }
  },
);

r('bad retention options are refused, naming the topic and field', async () => {
  const bus = await createJournalBus({ dir: freshDir(), ...small });
  try {
    await bus.createTopics([{ name: 'bad', partitions: 1, retention: { bytesMax: -1 } }]);
    assert.unreachable('should throw');
  } catch (e) {
    assert.instance(e, BusError);
    assert.is((e as BusError).code, 'bad-input');
    assert.is(
      (e as Error).message,
      'topic option retention.bytesMax must be an integer >= 0, topic=bad retention.bytesMax=-1',
    );
  }
  await bus.close();
});

const c = suite('journal bus compaction');

/** Latest value per key of a history where record i has key k<i % keys> and value v<i>. */
function expectedLatest(n: number, keys: number): Map<string, { offset: number; value: string }> {
  const m = new Map<string, { offset: number; value: string }>();
  for (let i = 0; i < n; i++) m.set(`k${i % keys}`, { offset: i, value: `v${i}` });
  return m;
}

function latestOf(got: ConsumedRecord[]): Map<string, { offset: number; value: string | null }[]> {
  const m = new Map<string, { offset: number; value: string | null }[]>();
  for (const x of got) {
    const l = m.get(x.key!) ?? [];
    l.push({
      offset: x.offset,
      value: x.value === null ? null : dec.decode(x.value).split('.')[0],
    });
    m.set(x.key!, l);
  }
  return m;
}

c(
  'the latest value per key is kept at its offset; superseded values go; records read back in offset order',
  async () => {
    const dir = freshDir();
    const bus = await createJournalBus({ dir, ...small });
    await bus.createTopics([{ name: 'kv', partitions: 1, compacted: true }]);
    await sendN(bus, 'kv', 0, 600, (i) => (i === 0 ? 'solo' : `k${i % 10}`));
    const report = bus.maintain();
    assert.ok(
      report.segmentsCompacted > 0 && report.recordsRemoved > 500,
      `removed ${report.recordsRemoved}`,
    );
    const got = await readAll(bus, 'kv');
    const offsets = got.map((x) => x.offset);
    assert.equal(
      offsets,
      [...offsets].sort((a, b) => a - b),
      'offset order',
    );
    const m = latestOf(got);
    assert.equal(
      m.get('solo'),
      [{ offset: 0, value: 'v0' }],
      'a key written once, in the oldest segment, keeps its value',
    );
    for (const [k, want] of expectedLatest(600, 10)) {
      const l = m.get(k)!;
      assert.equal(l[l.length - 1], want, `key ${k}: its latest value at its offset`);
    }
    // The active segment is not compacted, so a key may appear there more than once; sealed
    // segments hold latest values only: at most 10 records before the active segment.
    const segs = listSegments(partitionDir(dir, 'kv'));
    assert.ok(got.length < 10 + 600 / segs.length + 40, `${got.length} records left`);
    await bus.close();
    const again = await createJournalBus({ dir, ...small });
    assert.equal(
      (await readAll(again, 'kv')).map((x) => x.offset),
      offsets,
      'the same after a reopen',
    );
    assert.equal(again.maintain().recordsRemoved, 0, 'a second run finds nothing to remove');
    await again.close();
  },
);

c(
  'a tombstone is kept for tombstoneRetentionMs, then removed; it removes the values before it',
  async () => {
    const dir = freshDir();
    const bus = await createJournalBus({ dir, ...small });
    await bus.createTopics([
      {
        name: 'tomb',
        partitions: 1,
        compacted: true,
        compaction: { tombstoneRetentionMs: 60_000 },
      },
    ]);
    const p = await bus.producer();
    await p.send([
      { topic: 'tomb', key: 'gone', value: enc.encode('old'), partition: 0 },
      { topic: 'tomb', key: 'gone', value: null, partition: 0 },
    ]);
    await sendN(bus, 'tomb', 0, 400, (i) => `k${i % 5}`);
    bus.maintain();
    let got = await readAll(bus, 'tomb');
    assert.equal(
      got.filter((x) => x.key === 'gone').map((x) => [x.offset, x.value]),
      [[1, null]],
      'only the tombstone is left, at its offset',
    );
    bus.maintain(Date.now() + 120_000);
    got = await readAll(bus, 'tomb');
    assert.equal(
      got.filter((x) => x.key === 'gone'),
      [],
      'after tombstoneRetentionMs the tombstone goes too',
    );
    await bus.close();
  },
);

c(
  'a reader in the middle of the partition during a compaction goes on without a duplicate or a lost latest value',
  async () => {
    const dir = freshDir();
    const bus = await createJournalBus({ dir, ...small });
    await bus.createTopics([{ name: 'live', partitions: 1, compacted: true }]);
    await sendN(bus, 'live', 0, 600, (i) => `k${i % 10}`);
    const reader = await bus.consumer();
    await reader.assign([{ topic: 'live', partition: 0 }]);
    const got = await reader.poll({ timeoutMs: 0, recordsMax: 250 });
    bus.maintain();
    for (;;) {
      const more = await reader.poll({ timeoutMs: 0 });
      if (more.length === 0) break;
      got.push(...more);
    }
    const offsets = got.map((x) => x.offset);
    assert.is(new Set(offsets).size, offsets.length, 'no offset twice');
    assert.equal(
      offsets,
      [...offsets].sort((a, b) => a - b),
      'offset order',
    );
    const m = latestOf(got);
    for (const [k, want] of expectedLatest(600, 10))
      assert.equal(m.get(k)!.at(-1), want, `key ${k}`);
    await bus.close();
  },
);

function runCompactionChild(dir: string, fault: string): Promise<string | null> {
  const child = spawn(
    process.execPath,
    [fileURLToPath(new URL('./bus-journal-compaction.child.js', import.meta.url)), dir, fault],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  return new Promise((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
}

c(
  "kill -9 in the middle of a compaction: the restart finds each key's latest value exactly once, at its offset",
  async () => {
    for (const fault of [
      'compaction-segment-written',
      'compaction-index-removed',
      'compaction-after-first-segment',
    ]) {
      const dir = freshDir();
      assert.is(
        await runCompactionChild(dir, fault),
        'SIGKILL',
        `${fault}: the child was killed in the compaction`,
      );
      const bus: JournalBus = await createJournalBus({ dir, ...small });
      const check = async (when: string): Promise<number[]> => {
        const got = await readAll(bus, 'kv');
        const offsets = got.map((x) => x.offset);
        assert.is(new Set(offsets).size, offsets.length, `${fault} ${when}: no offset twice`);
        assert.equal(
          offsets,
          [...offsets].sort((a, b) => a - b),
          `${fault} ${when}: offset order`,
        );
        const m = latestOf(got);
        assert.equal(
          m.get('solo'),
          [{ offset: 0, value: 'v0' }],
          `${fault} ${when}: the key written once keeps its value`,
        );
        for (const [k, want] of expectedLatest(600, 10)) {
          const l = m.get(k) ?? [];
          assert.equal(l.at(-1), want, `${fault} ${when}: key ${k}'s latest value`);
          assert.is(
            l.filter((x) => x.offset === want.offset).length,
            1,
            `${fault} ${when}: key ${k}'s latest value once`,
          );
        }
        for (const x of got)
          assert.is(
            dec.decode(x.value!).split('.')[0],
            `v${x.offset}`,
            `${fault} ${when}: offset ${x.offset} keeps its value`,
          );
        return offsets;
      };
      const afterCrash = await check('after the crash');
      if (fault === 'compaction-after-first-segment') {
        assert.ok(
          afterCrash.length < 600,
          `${fault}: the first segment is the compacted one, the rest old (${afterCrash.length} records)`,
        );
      } else {
        assert.is(
          afterCrash.length,
          600,
          `${fault}: no segment was replaced yet: the old set, whole`,
        );
      }
      assert.equal(
        fs.readdirSync(partitionDir(dir, 'kv')).filter((f) => f.endsWith('.new')),
        [],
        `${fault}: leftovers removed at open`,
      );
      bus.maintain();
      await check('after compacting again');
      await bus.close();
    }
  },
);

r.after(() => {
  if (!process.env.KEEP) fs.rmSync(root, { recursive: true, force: true });
});
r.run();
c.run();
