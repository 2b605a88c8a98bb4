/**
 * examples/shop end to end, as the README walks through it: on the embedded journal (SQLite),
 * `sluice run` killed with kill -9 while it works and started again, a pump's crash between its
 * bus commit and its staging delete (SLUICE_FAULT=after-append), then verify.js against the
 * database (and a price changed behind capture's back makes it fail); on the real Kafka broker,
 * the same topology with its one bus line changed, run by the example's main and verified.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import Database from 'better-sqlite3';
import { loadTopology, type Topology } from '../index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { runShop } from '../examples/shop/main.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const example = (f: string) => path.join(root, 'examples', 'shop', f);
const dist = (f: string) => path.join(root, 'dist', 'examples', 'shop', f);
const cli = path.join(root, 'dist', 'cli', 'sluice.js');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'h_shop_test-'));
const s = suite('examples/shop');
const kafka = await testKafka();

/** A node child with SHOP_DATA (and `env`) set; `until(text)` resolves once its output has text. */
function child(args: string[], shopData: string, env: Record<string, string> = {}) {
  const p = spawn(process.execPath, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SHOP_DATA: shopData, ...env },
  });
  let out = '';
  const waiters: { text: string; resolve: () => void }[] = [];
  const onData = (b: Buffer) => {
    out += b;
    for (const w of waiters.splice(0)) {
      if (out.includes(w.text)) w.resolve();
      else waiters.push(w);
    }
  };
  p.stdout.on('data', onData);
  p.stderr.on('data', onData);
  const killer = setTimeout(() => p.kill('SIGKILL'), 120_000); // bound every child
  const done = new Promise<{ code: number | null; signal: string | null; out: string }>((r) =>
    p.on('exit', (code, signal) => {
      clearTimeout(killer);
      r({ code, signal, out });
    }),
  );
  return {
    done,
    kill: (signal: NodeJS.Signals) => p.kill(signal),
    until: (text: string) =>
      new Promise<void>((resolve, reject) => {
        if (out.includes(text)) return resolve();
        waiters.push({ text, resolve });
        void done.then(() => reject(new Error(`exited before printing "${text}":\n${out}`)));
      }),
  };
}

/** Polls `cond` every `everyMs` until it holds; fails the test after 60 s (a bound, not a timing). */
async function waitFor(cond: () => boolean, what: string, everyMs: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!cond()) {
    if (Date.now() > deadline) assert.unreachable(`not within 60 s: ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

const ok = async (c: ReturnType<typeof child>) => {
  const r = await c.done;
  assert.equal(r.code, 0, r.out);
  return r.out;
};

s(
  'journal bus, SQLite: a pump killed between its bus commit and its staging delete, sluice run killed with kill -9 mid-stream; verify.js finds every invoice once, every balance and paid total equal to the database',
  async () => {
    const data = fs.mkdtempSync(path.join(tmp, 'journal-'));
    const topology = example('topology.yaml');
    const workload = (...more: string[]) =>
      child([dist('workload.js'), '--topology', topology, ...more], data);
    await ok(workload('--setup'));

    // A pump's crash between its bus commit and its staging delete: only order changes are
    // staged (no payments), and with SLUICE_FAULT=after-append an orders pump SIGKILLs the
    // process right after its first committed batch; the next start must delete those staged
    // rows without shipping them again.
    await ok(workload('--orders', '200', '--payment-every', '0'));
    const faulty = child([cli, 'run', topology], data, { SLUICE_FAULT: 'after-append' });
    assert.equal((await faulty.done).signal, 'SIGKILL');
    const next = child([cli, 'run', topology], data);
    await next.until(' is up (');
    await next.until('staged changes the target already held');

    // kill -9 while the workload writes: pumps ship, processors and the service work.
    const writing = workload('--orders', '1000', '--seed', '7');
    const live = new Database(path.join(data, 'shop.db'), { readonly: true });
    const count = (sql: string) => live.prepare(sql).pluck().get() as number;
    await waitFor(() => count('SELECT count(*) FROM shop_orders') >= 400, '200 more orders', 5);
    next.kill('SIGKILL');
    const atKill = count('SELECT count(*) FROM shop_orders');
    const killed = await next.done;
    assert.equal(killed.signal, 'SIGKILL');
    assert.match(
      killed.out,
      /\[pump:orders\/\d\] deleted \d+ staged changes the target already held/,
    );
    await ok(writing);
    live.close();
    console.log(`  kill -9 of sluice run with ${atKill - 200} of 1000 orders placed`);

    // verify.js starts the topology again: it recovers from the kill and ships what is staged.
    const out = await ok(child([dist('verify.js'), '--topology', topology], data));
    assert.match(out, /verification {14}OK: 1200 placed orders, 1200 invoices/);

    // A price changed behind capture's back (lines are captured on insert only): the invoice no
    // longer matches the database, and verify says so with exit 1.
    const db = new Database(path.join(data, 'shop.db'));
    const { order_id: orderId } = db
      .prepare('SELECT order_id FROM shop_order_lines WHERE line_no = 1 ORDER BY order_id LIMIT 1')
      .get() as { order_id: number };
    db.prepare(
      'UPDATE shop_order_lines SET unit_cents = unit_cents + 100, qty = qty + 1 WHERE order_id = ? AND line_no = 1',
    ).run(orderId);
    db.close();
    const bad = await child(
      [dist('verify.js'), '--topology', topology, '--settle-ms', '1000'],
      data,
    ).done;
    assert.equal(bad.code, 1, bad.out);
    assert.match(bad.out, `order ${orderId}: invoice subtotalCents`);
    assert.match(bad.out, `order ${orderId}: invoice signature`);
    assert.match(bad.out, /customer c\d+: balance \d+ cents in \d+ invoices != /);
  },
);

/** The topology with every queue, the topology name and the groups prefixed (a shared broker). */
function prefixed(t: Topology, prefix: string): Topology {
  const q = (name: string) => `${prefix}.${name}`;
  t.name = `${prefix}-${t.name}`;
  for (const x of t.queues) x.name = q(x.name);
  for (const c of t.capture) for (const x of c.tables) x.target = q(x.target);
  for (const p of t.processors) {
    p.inputs = p.inputs.map(q);
    p.outputs = p.outputs.map(q);
    if (p.stateTopic !== undefined) p.stateTopic = q(p.stateTopic);
    if (p.deadLetterTopic !== undefined) p.deadLetterTopic = q(p.deadLetterTopic);
    p.group = q(p.group ?? p.name);
  }
  for (const v of t.services) {
    v.inputs = v.inputs.map(q);
    v.output = q(v.output);
    v.errors.deadLetterQueue = q(v.errors.deadLetterQueue);
  }
  return t;
}

s(
  'kafka bus (the real broker), SQLite: topology.kafka.yaml differs from topology.yaml in its bus line only, and the run verifies against the database',
  async () => {
    const journal = fs.readFileSync(example('topology.yaml'), 'utf8').split('\n');
    const onKafka = fs.readFileSync(example('topology.kafka.yaml'), 'utf8').split('\n');
    const differing = journal.flatMap((l, i) => (l === onKafka[i] ? [] : [[l, onKafka[i]]]));
    assert.equal(journal.length, onKafka.length);
    assert.equal(differing, [
      [
        'bus: { kind: journal }',
        'bus: { kind: kafka, brokers: ["${SLUICE_KAFKA_BROKERS:-127.0.0.1:9092}"] }',
      ],
    ]);

    const data = fs.mkdtempSync(path.join(tmp, 'kafka-'));
    const topology = prefixed(
      loadTopology(example('topology.kafka.yaml'), {
        env: { ...process.env, SHOP_DATA: data, SLUICE_KAFKA_BROKERS: kafka.brokers[0]! },
      }),
      `shop-${process.pid}`,
    );
    const run = await runShop(topology, { orders: 400, log: () => {} });
    assert.equal(run.verdict.mismatches, []);
    assert.equal(run.verdict.placedOrders, 400);
    assert.equal(run.verdict.invoices, 400);
    assert.equal(run.captured.orders, run.workload.orders * 2 + run.workload.lines);
    assert.equal(run.captured.payments, run.workload.payments);
  },
);

s.after(async () => {
  await kafka.release();
  fs.rmSync(tmp, { recursive: true, force: true });
});
s.run();
