/**
 * The journal sink's crash reconciliation (engine/cdc/journal-sink.ts) on real journal
 * partitions: its window is the last `limit` staged changes, whatever else follows them. Written
 * after a kill -9 of cdc-initial-load-crash (PostgreSQL, CI) appended staging id 572 twice: the
 * read events of the chunk appended after the unacked changes had filled the window. And the
 * sink itself (JournalPumpSink), without a worker: each change lands in its key's partition with
 * the installation id, durable after sync(); a refused batch appends nothing to any partition;
 * a change of another pump's partition or of a table without a target is refused by name.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  JournalPumpSink,
  RecordRefusedError,
  recentStagingIdsInJournal,
  type StagedChange,
} from '../engine/cdc/index.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  ChangeRecordWriter,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
  EnvelopeView,
  decodeChange,
  encodeJson,
} from '../engine/codec/index.js';

const INSTALLATION = '0123456789abcdef';

/** What one record of a partition is: a staged change (its id), a read event, or a JSON event. */
type Rec = { staged: string; installation?: string } | 'read' | 'json';

/** A fresh partition directory holding `recs` in order. */
function partition(recs: Rec[]): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-journal-sink-'));
  const a = Appender.open({ dir });
  const writer = new ChangeRecordWriter();
  let n = 0;
  for (const r of recs) {
    n++;
    if (r === 'json') {
      a.append(
        new EnvelopeWriter().encode({
          type: EVENT_TYPE_JSON,
          key: 'k',
          payload: encodeJson({ n }),
        }),
      );
      continue;
    }
    const read = r === 'read';
    writer.build({
      stagingId: read ? '' : r.staged,
      table: 'items',
      op: read ? 'read' : 'update',
      key: JSON.stringify([String(n)]),
      before: read ? null : '{}',
      after: '{}',
      txid: '',
      commitTimeMs: 1_000 + n,
      installation: read ? INSTALLATION : (r.installation ?? INSTALLATION),
    });
    a.append(new Uint8Array(writer.bytes()));
  }
  a.close();
  return dir;
}

const staged = (from: number, to: number, installation?: string): Rec[] =>
  Array.from({ length: to - from + 1 }, (_, i) => ({ staged: String(from + i), installation }));
const reads = (count: number): Rec[] => Array.from({ length: count }, () => 'read' as const);
const sorted = (ids: Set<string>) => [...ids].sort((x, y) => Number(x) - Number(y));

const dirs: string[] = [];
const made = (recs: Rec[]) => {
  const dir = partition(recs);
  dirs.push(dir);
  return dir;
};

test.after(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

test('the last batch of staged changes is found behind more read events than the window holds (a load chunk appended after them, before the ack)', () => {
  // A load cycle: 4 claimed changes, then the chunk's 2000 read events; the window is 4.
  const dir = made([...staged(1, 4), ...staged(568, 571), ...reads(2000)]);
  assert.equal(sorted(recentStagingIdsInJournal([dir], 4, INSTALLATION)), [
    '568',
    '569',
    '570',
    '571',
  ]);
});

test('read events between staged changes take no place in the window: the last `limit` staged changes are returned, no older one', () => {
  const recs: Rec[] = [];
  for (let id = 1; id <= 12; id++) recs.push({ staged: String(id) }, ...reads(7), 'json');
  const dir = made(recs);
  assert.equal(sorted(recentStagingIdsInJournal([dir], 5, INSTALLATION)), [
    '8',
    '9',
    '10',
    '11',
    '12',
  ]);
});

test("each partition has its own window of `limit` staged changes; another installation's changes count in it and are not returned", () => {
  const p0 = made([...staged(1, 3), ...reads(50)]);
  const p1 = made([...staged(20, 21), ...staged(5, 6, 'fedcba9876543210'), ...reads(50)]);
  assert.equal(sorted(recentStagingIdsInJournal([p0, p1], 3, INSTALLATION)), ['1', '2', '3', '21']);
});

test('without an installation id nothing is returned; an empty partition returns nothing', () => {
  const dir = made([...staged(1, 3), ...reads(3)]);
  assert.equal(sorted(recentStagingIdsInJournal([dir], 10, '')), []);
  assert.equal(sorted(recentStagingIdsInJournal([made([])], 10, INSTALLATION)), []);
});

test('limit must be an integer >= 1', () => {
  const dir = made([]);
  assert.throws(() => recentStagingIdsInJournal([dir], 0, INSTALLATION), /limit=0/);
});

/** A staged change of table `table`, key `k<n>`, staging id `<n>`, key hash `hash`. */
function change(n: number, hash: number, table = 'ledger', after = `{"id":${n}}`): StagedChange {
  return {
    stagingId: String(n),
    table,
    op: 'insert',
    key: `["k${n}"]`,
    keyHash: hash,
    before: null,
    after,
    txid: '7',
    timeMs: 1_700_000_000_000 + n,
    attempts: 0,
  };
}

/** Every change record of the partition in `dir`: staging id, key, installation. */
function changesIn(dir: string): { stagingId: string; key: string; installation: string }[] {
  const t = Tailer.open({ dir });
  const view = new EnvelopeView();
  const out: { stagingId: string; key: string; installation: string }[] = [];
  try {
    for (let rec = t.next(); rec; rec = t.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      const ch = decodeChange(view.payload);
      out.push({
        stagingId: ch.stagingId,
        key: view.key ?? '',
        installation: ch.installation ?? '',
      });
    }
  } finally {
    t.close();
  }
  return out;
}

/** Pump 0 of 2 over queue `changes` of 4 partitions: it appends partitions 0 and 2. */
function pumpSink(recordBytesMax = 1_000_000) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-pump-sink-'));
  const dirs = { 0: path.join(root, '0'), 2: path.join(root, '2') };
  let appended = 0;
  const sink = new JournalPumpSink({
    source: 'app',
    actor: 'pump:app/0',
    pump: 0,
    pumps: 2,
    targets: { changes: { partitions: 4, dirs, segmentBytes: 1 << 20, fsync: 'batch' } },
    tableTargets: { ledger: 'changes' },
    recordBytesMax,
    onAppended: (n) => (appended += n),
  });
  return { sink, dirs, appended: () => appended };
}

test('JournalPumpSink: each change in its key-hash partition, stamped with the installation id, durable after sync()', async () => {
  const { sink, dirs, appended } = pumpSink();
  sink.open();
  assert.equal([...sink.recentStagingIds(10, INSTALLATION)], []);
  sink.appendBatch([change(1, 0), change(2, 2), change(3, 4), change(4, 6)]);
  await sink.sync();
  assert.is(appended(), 4);
  // Readable from another tailer once durable, before close().
  assert.equal(
    changesIn(dirs[0]).map((c) => [c.stagingId, c.key, c.installation]),
    [
      ['1', '["k1"]', INSTALLATION],
      ['3', '["k3"]', INSTALLATION],
    ],
  );
  assert.equal(
    changesIn(dirs[2]).map((c) => c.stagingId),
    ['2', '4'],
  );
  // The crash reconciliation finds them.
  assert.equal([...sink.recentStagingIds(10, INSTALLATION)].sort(), ['1', '2', '3', '4']);
  sink.close();
});

test('JournalPumpSink: a batch with a record over recordBytesMax appends nothing to any partition; the next batch lands', async () => {
  const { sink, dirs, appended } = pumpSink(400);
  sink.open();
  sink.recentStagingIds(10, INSTALLATION);
  assert.throws(
    () =>
      sink.appendBatch([
        change(1, 0),
        change(2, 2),
        change(3, 0, 'ledger', `"${'x'.repeat(500)}"`),
      ]),
    (e: Error) =>
      e instanceof RecordRefusedError &&
      /exceeds recordBytesMax 400 of capture source "app" \(target queue "changes"\) \(in a batch of 3\)/.test(
        e.message,
      ),
  );
  sink.appendBatch([change(4, 2)]);
  await sink.sync();
  sink.close();
  assert.equal(changesIn(dirs[0]), []);
  assert.equal(
    changesIn(dirs[2]).map((c) => c.stagingId),
    ['4'],
  );
  assert.is(appended(), 1);
});

test("JournalPumpSink: a change of another pump's partition or of a table without a target is refused by name", () => {
  const { sink, dirs } = pumpSink();
  sink.open();
  assert.throws(
    () => sink.appendBatch([change(1, 1)]),
    /pump pump:app\/0: claimed a change for changes\/1, a partition this pump does not append \(pump 0 of 2\)/,
  );
  assert.throws(
    () => sink.appendBatch([change(2, 0, 'notes')]),
    /staged change 2 is for table "notes", which has no target in the topology/,
  );
  sink.close();
  assert.equal(changesIn(dirs[0]), []);
});

test.run();
