/**
 * The journal sink's crash reconciliation (engine/cdc/journal-sink.ts) on real journal
 * partitions: its window is the last `limit` staged changes, whatever else follows them. Written
 * after a kill -9 of cdc-initial-load-crash (PostgreSQL, CI) appended staging id 572 twice: the
 * read events of the chunk appended after the unacked changes had filled the window.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { recentStagingIdsInJournal } from '../engine/cdc/index.js';
import { Appender } from '../engine/journal/index.js';
import {
  ChangeRecordWriter,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
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

test.run();
