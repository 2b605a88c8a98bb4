/** Runs the pattern examples of README "Message patterns" and checks what they print. */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { main as compacted } from '../examples/patterns/compacted.js';
import { main as durable } from '../examples/patterns/durable.js';
import { main as pubsub } from '../examples/patterns/pubsub.js';
import { main as rpc } from '../examples/patterns/rpc.js';
import { main as stateAndEvent } from '../examples/patterns/state-and-event.js';

test('examples/patterns/durable: one invoice per order, 20% added', async () => {
  assert.equal(await durable(), [
    { orderId: 'o-1', customer: 'ada', totalCents: 1500 },
    { orderId: 'o-2', customer: 'bob', totalCents: 1188 },
    { orderId: 'o-3', customer: 'ada', totalCents: 4800 },
  ]);
});

test('examples/patterns/durable runs as a program; a second run on the same dir adds three new orders', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-durable-example-'));
  const run = (): { orderId: string; new: boolean }[] =>
    execFileSync(
      process.execPath,
      [fileURLToPath(new URL('../examples/patterns/durable.js', import.meta.url)), dir],
      { encoding: 'utf8' },
    )
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { orderId: string; new: boolean });
  try {
    assert.equal(
      run().map((i) => [i.orderId, i.new]),
      [
        ['o-1', true],
        ['o-2', true],
        ['o-3', true],
      ],
    );
    assert.equal(
      run().map((i) => [i.orderId, i.new]),
      [
        ['o-1', false],
        ['o-2', false],
        ['o-3', false],
        ['o-4', true],
        ['o-5', true],
        ['o-6', true],
      ],
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('examples/patterns/pubsub: only prices published after the start', async () => {
  const seen = (await pubsub()).sort((a, b) => a.symbol.localeCompare(b.symbol));
  assert.equal(seen, [
    { symbol: 'ACME', priceCents: 101 },
    { symbol: 'INIT', priceCents: 5000 },
  ]);
});

test('examples/patterns/compacted: snapshot without deleted keys, then changes with the previous value', async () => {
  assert.equal(await compacted(), {
    snapshot: { timeoutMs: '800' },
    changes: ['timeoutMs: 800 -> 1000'],
  });
});

test('examples/patterns/state-and-event: balances per account, in deposit order', async () => {
  assert.equal(await stateAndEvent(), ['ada: 1000', 'ada: 1500', 'bob: 250']);
});

test('examples/patterns/rpc: a quote, then a timeout for the slow one', async () => {
  assert.equal(await rpc(), [{ symbol: 'ACME', priceCents: 1234 }, 'timeout: UNKNOWN']);
});

test.run();
