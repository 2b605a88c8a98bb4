/**
 * Shared by the initial-load tests (not a test file itself): the `items` table per dialect, its
 * rows as the images render them, and a consumer that keeps a table from change events.
 */
import fs from 'node:fs';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, decodeChange, type Change } from '../engine/codec/index.js';
import type { AppDb, Dialect } from './cdc-helpers.js';

export const ITEMS_DDL: Record<Dialect, string> = {
  sqlite: 'CREATE TABLE items (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, note TEXT)',
  postgres: 'CREATE TABLE items (id bigint PRIMARY KEY, n bigint NOT NULL, note text)',
  mariadb:
    'CREATE TABLE items (id bigint PRIMARY KEY, n bigint NOT NULL, note varchar(40)) ENGINE=InnoDB',
};

/** Fills items with ids 1..rows, n = id, note 'v0'. */
export async function fillItems(app: AppDb, rows: number): Promise<void> {
  if (app.dialect === 'postgres') {
    await app.exec(`INSERT INTO items SELECT g, g, 'v0' FROM generate_series(1, ${rows}) g`);
  } else if (app.dialect === 'mariadb') {
    for (let from = 1; from <= rows; from += 50_000) {
      const to = Math.min(rows, from + 49_999);
      await app.exec(`INSERT INTO items SELECT seq, seq, 'v0' FROM seq_${from}_to_${to}`);
    }
  } else {
    await app.exec(
      `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ${rows}) INSERT INTO items SELECT x, x, 'v0' FROM g`,
    );
  }
}

/** The database's items as the images render them: key text -> {id, n, note}. */
export async function itemsInDb(app: AppDb): Promise<Map<string, Record<string, string | null>>> {
  const rows = await app.query<{ id: unknown; n: unknown; note: unknown }>(
    'SELECT id, n, note FROM items ORDER BY id',
  );
  return new Map(
    rows.map((r) => [
      JSON.stringify([String(r.id)]),
      { id: String(r.id), n: String(r.n), note: r.note === null ? null : String(r.note) },
    ]),
  );
}

/**
 * A consumer keeping a table: applies one pump's events in order (read, insert, update: the
 * after image; delete: the row is gone) and counts the read events per key in `reads`.
 */
export function applyEvents(
  table: Map<string, unknown>,
  events: Iterable<{ op: string; key: string; after: string | null }>,
  reads: Map<string, number>,
): void {
  for (const e of events) {
    if (e.op === 'delete') table.delete(e.key);
    else table.set(e.key, JSON.parse(e.after!));
    if (e.op === 'read') reads.set(e.key, (reads.get(e.key) ?? 0) + 1);
  }
}

/** Every change of one journal partition, decoded at once (a record's bytes are reused by the next). */
export function readAll(dir: string): Change[] {
  if (!fs.existsSync(dir)) return [];
  const t = Tailer.open({ dir });
  const view = new EnvelopeView();
  const out: Change[] = [];
  for (let r = t.next(); r; r = t.next()) {
    view.wrap(r.bytes, 0, r.bytes.length);
    out.push(decodeChange(view.payload));
  }
  t.close();
  return out;
}
