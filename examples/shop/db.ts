/**
 * The shop's database, SQLite or PostgreSQL (the capture source's `database` in the topology):
 * its three tables, the workload's one transaction per order, and what the verification reads.
 *
 * | table            | columns                                                  | key     |
 * |------------------|----------------------------------------------------------|---------|
 * | shop_orders      | id, customer, status ('open' -> 'placed'), line_count    | id      |
 * | shop_order_lines | order_id, line_no, sku, qty, unit_cents                  | both    |
 * | shop_payments    | id, customer, amount_cents                               | id      |
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { CaptureSource } from 'sluice';
import type { OrderLine } from './model.js';

/** One order as the workload places it. */
export interface NewOrder {
  customer: string;
  lines: { sku: string; qty: number; unitCents: number }[];
}

/** An order as the database has it, for the verification. */
export interface OrderRow {
  id: string;
  customer: string;
  status: string;
  lines: number;
  subtotalCents: number;
}

/** The shop's tables in one database. */
export interface ShopDb {
  readonly dialect: 'sqlite' | 'postgres';
  /**
   * One transaction: inserts the order (status open), its lines, then sets it placed; with
   * `paymentCents`, also a payment of the customer.
   */
  placeOrder(order: NewOrder, paymentCents?: number): Promise<void>;
  /** Every order with its line count and subtotal (sum of qty * unit_cents). */
  orders(): Promise<OrderRow[]>;
  /** Every order's lines, by order id, in line_no order. */
  lines(): Promise<Map<string, OrderLine[]>>;
  /** Per customer: the sum of its payments and their count. */
  payments(): Promise<Map<string, { paidCents: number; payments: number }>>;
  close(): Promise<void>;
}

type Db = CaptureSource['database'];

const SQLITE_DDL = `
CREATE TABLE shop_orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL,
  status TEXT NOT NULL, line_count INTEGER NOT NULL);
CREATE TABLE shop_order_lines (order_id INTEGER NOT NULL, line_no INTEGER NOT NULL,
  sku TEXT NOT NULL, qty INTEGER NOT NULL, unit_cents INTEGER NOT NULL,
  PRIMARY KEY (order_id, line_no));
CREATE TABLE shop_payments (id INTEGER PRIMARY KEY, customer TEXT NOT NULL,
  amount_cents INTEGER NOT NULL);`;

const pgDdl = (s: string) => `
CREATE TABLE ${s}.shop_orders (id bigserial PRIMARY KEY, customer text NOT NULL,
  status text NOT NULL, line_count integer NOT NULL);
CREATE TABLE ${s}.shop_order_lines (order_id bigint NOT NULL, line_no integer NOT NULL,
  sku text NOT NULL, qty integer NOT NULL, unit_cents integer NOT NULL,
  PRIMARY KEY (order_id, line_no));
CREATE TABLE ${s}.shop_payments (id bigserial PRIMARY KEY, customer text NOT NULL,
  amount_cents integer NOT NULL);`;

const ORDERS_SQL = (s: string) =>
  `SELECT o.id, o.customer, o.status, count(l.line_no) AS lines,
     coalesce(sum(l.qty * l.unit_cents), 0) AS subtotal
   FROM ${s}shop_orders o LEFT JOIN ${s}shop_order_lines l ON l.order_id = o.id
   GROUP BY o.id, o.customer, o.status ORDER BY o.id`;
const LINES_SQL = (s: string) =>
  `SELECT order_id, line_no, sku, qty, unit_cents FROM ${s}shop_order_lines ORDER BY order_id, line_no`;
const PAYMENTS_SQL = (s: string) =>
  `SELECT customer, sum(amount_cents) AS paid, count(*) AS n FROM ${s}shop_payments GROUP BY customer`;

type LineRow = {
  order_id: number | string;
  line_no: number;
  sku: string;
  qty: number;
  unit_cents: number;
};
function linesByOrder(rows: LineRow[]): Map<string, OrderLine[]> {
  const out = new Map<string, OrderLine[]>();
  for (const r of rows) {
    const id = String(r.order_id);
    const list = out.get(id) ?? [];
    list.push({ lineNo: r.line_no, sku: r.sku, qty: r.qty, unitCents: r.unit_cents });
    out.set(id, list);
  }
  return out;
}

const quoteIdent = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * Creates the shop's tables afresh: SQLite: a new file (the old one and its WAL deleted);
 * PostgreSQL: the database if missing, and the schema (`database.schema`, default public)
 * dropped with everything in it and created again, capture's schema (`captureSchema`) dropped.
 */
export async function createShopDb(db: Db): Promise<void> {
  if (db.dialect === 'sqlite') {
    fs.mkdirSync(path.dirname(db.file), { recursive: true });
    for (const f of [db.file, `${db.file}-wal`, `${db.file}-shm`]) fs.rmSync(f, { force: true });
    const sqlite = new Database(db.file);
    try {
      sqlite.pragma('journal_mode = WAL');
      sqlite.exec(SQLITE_DDL);
    } finally {
      sqlite.close();
    }
    return;
  }
  if (db.dialect !== 'postgres')
    throw new Error(`the shop runs on sqlite or postgres, not ${db.dialect}`);
  await ensurePgDatabase(db.url);
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const s = quoteIdent(db.schema ?? 'public');
    // Capture's own schema too: staging rows of an earlier run are not this run's changes.
    await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(db.captureSchema ?? 'sluice')} CASCADE`);
    await client.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    await client.query(`CREATE SCHEMA ${s}`);
    await client.query(pgDdl(s));
  } finally {
    await client.end();
  }
}

async function ensurePgDatabase(url: string): Promise<void> {
  const name = decodeURIComponent(new URL(url).pathname.slice(1));
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    const r = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (r.rowCount === 0) await client.query(`CREATE DATABASE ${quoteIdent(name)}`);
  } finally {
    await client.end();
  }
}

/** Opens the shop's tables (made by {@link createShopDb}) for the workload and the verification. */
export async function openShopDb(db: Db): Promise<ShopDb> {
  if (db.dialect === 'sqlite') return openSqlite(db.file, db.busyTimeoutMs ?? 5000);
  if (db.dialect === 'postgres') return openPostgres(db.url, db.schema ?? 'public');
  throw new Error(`the shop runs on sqlite or postgres, not ${db.dialect}`);
}

function openSqlite(file: string, busyTimeoutMs: number): ShopDb {
  const sqlite = new Database(file, { timeout: busyTimeoutMs });
  const insertOrder = sqlite.prepare(
    "INSERT INTO shop_orders (customer, status, line_count) VALUES (?, 'open', ?)",
  );
  const insertLine = sqlite.prepare(
    'INSERT INTO shop_order_lines (order_id, line_no, sku, qty, unit_cents) VALUES (?, ?, ?, ?, ?)',
  );
  const place = sqlite.prepare("UPDATE shop_orders SET status = 'placed' WHERE id = ?");
  const pay = sqlite.prepare('INSERT INTO shop_payments (customer, amount_cents) VALUES (?, ?)');
  const placeTx = sqlite.transaction((order: NewOrder, paymentCents?: number) => {
    const id = insertOrder.run(order.customer, order.lines.length).lastInsertRowid;
    order.lines.forEach((l, i) => insertLine.run(id, i + 1, l.sku, l.qty, l.unitCents));
    place.run(id);
    if (paymentCents !== undefined) pay.run(order.customer, paymentCents);
  });
  return {
    dialect: 'sqlite',
    placeOrder: async (order, paymentCents) => placeTx.immediate(order, paymentCents),
    orders: async () =>
      (
        sqlite.prepare(ORDERS_SQL('')).all() as {
          id: number;
          customer: string;
          status: string;
          lines: number;
          subtotal: number;
        }[]
      ).map((r) => ({
        id: String(r.id),
        customer: r.customer,
        status: r.status,
        lines: r.lines,
        subtotalCents: r.subtotal,
      })),
    lines: async () => linesByOrder(sqlite.prepare(LINES_SQL('')).all() as LineRow[]),
    payments: async () =>
      new Map(
        (
          sqlite.prepare(PAYMENTS_SQL('')).all() as { customer: string; paid: number; n: number }[]
        ).map((r) => [r.customer, { paidCents: r.paid, payments: r.n }]),
      ),
    close: async () => {
      sqlite.close();
    },
  };
}

function openPostgres(url: string, schema: string): ShopDb {
  const pool = new pg.Pool({ connectionString: url, max: 8 });
  const s = `${quoteIdent(schema)}.`;
  return {
    dialect: 'postgres',
    async placeOrder(order, paymentCents) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const id = (
          await client.query(
            `INSERT INTO ${s}shop_orders (customer, status, line_count) VALUES ($1, 'open', $2) RETURNING id`,
            [order.customer, order.lines.length],
          )
        ).rows[0].id as string;
        for (const [i, l] of order.lines.entries())
          await client.query(
            `INSERT INTO ${s}shop_order_lines (order_id, line_no, sku, qty, unit_cents) VALUES ($1, $2, $3, $4, $5)`,
            [id, i + 1, l.sku, l.qty, l.unitCents],
          );
        await client.query(`UPDATE ${s}shop_orders SET status = 'placed' WHERE id = $1`, [id]);
        if (paymentCents !== undefined)
          await client.query(
            `INSERT INTO ${s}shop_payments (customer, amount_cents) VALUES ($1, $2)`,
            [order.customer, paymentCents],
          );
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw e;
      } finally {
        client.release();
      }
    },
    async orders() {
      const rows = (await pool.query(ORDERS_SQL(s))).rows as {
        id: string;
        customer: string;
        status: string;
        lines: string;
        subtotal: string;
      }[];
      return rows.map((r) => ({
        id: String(r.id),
        customer: r.customer,
        status: r.status,
        lines: Number(r.lines),
        subtotalCents: Number(r.subtotal),
      }));
    },
    async lines() {
      return linesByOrder((await pool.query(LINES_SQL(s))).rows as LineRow[]);
    },
    async payments() {
      const rows = (await pool.query(PAYMENTS_SQL(s))).rows as {
        customer: string;
        paid: string;
        n: string;
      }[];
      return new Map(
        rows.map((r) => [r.customer, { paidCents: Number(r.paid), payments: Number(r.n) }]),
      );
    },
    close: () => pool.end(),
  };
}
