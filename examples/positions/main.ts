/**
 * The positions example: trades and timer events -> the positions service, stopped and
 * restarted `--rounds` times with the topology's restart strategy, then checked against a
 * reference computed from the input queues.
 *
 *   node dist/examples/positions/main.js [--topology examples/positions/topology.output.yaml]
 *        [--trades 20000] [--rounds 3] [--fresh]
 *
 * Each round appends `--trades` random trades to `trades`, starts the topology (timing the
 * restart: positions, restore, replay), waits until the service has processed every trade
 * while the runtime's timer appends periodic update events to `position-timer`, and stops it
 * (the timer drains first, the service after it has read everything). Prints one JSON line
 * `{ topology, rounds, restartMs, trades, ticks, match }`; exits 0 when the service's state (the
 * newest output, or the key-value store rebuilt from the output) equals the reference
 * recomputed from the input queues, 1 on a mismatch, 2 on an error.
 */
import fs from 'node:fs';
import { Command } from 'commander';
import { loadTopology, startTopology, partitionDir, type Topology } from 'sluice';
import { Appender, Tailer } from '../../engine/journal/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
  decodeJson,
  encodeJson,
} from '../../engine/codec/index.js';
import { KvStore, restoreKvStore } from '../../engine/replay/index.js';
import type { PositionsOutput } from './services/positions.js';

const INSTRUMENTS = ['AAPL', 'MSFT', 'NVDA', 'AMZN', 'GOOG', 'META', 'TSLA', 'AVGO'];

/**
 * The service's state as its output shows it: the newest full position list, or (key-value
 * store) the store rebuilt from the output. Null before the first output.
 */
function outputState(topology: Topology): PositionsOutput | null {
  const t = Tailer.open({ dir: partitionDir(topology, 'positions-out', 0) });
  const view = new EnvelopeView();
  try {
    if (topology.services[0].module.endsWith('positions-kv.js')) {
      const store = new KvStore(
        new EnvelopeWriter(),
        () => {},
        () => ({ queue: 0, partition: 0, index: 0 }),
      );
      restoreKvStore(store, t, 'positions-out');
      const o = store.toObject();
      const positions = Object.keys(o)
        .filter((k) => k !== 'trades' && k !== 'ticks')
        .sort()
        .map((k) => [k, ...(o[k] as [number, number])] as [string, number, number]);
      return { trades: (o.trades as number) ?? 0, ticks: (o.ticks as number) ?? 0, positions };
    }
    t.moveToEnd();
    for (let rec = t.previous(); rec; rec = t.previous()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      if (view.type === EVENT_TYPE_JSON) return decodeJson(view.payload) as PositionsOutput;
    }
    return null;
  } finally {
    t.close();
  }
}

/** The reference: positions recomputed from every trade and tick in the input queues. */
function reference(topology: Topology): PositionsOutput {
  const positions = new Map<string, [number, number]>();
  const view = new EnvelopeView();
  let trades = 0;
  const t = Tailer.open({ dir: partitionDir(topology, 'trades', 0) });
  for (let rec = t.next(); rec; rec = t.next()) {
    view.wrap(rec.bytes, 0, rec.bytes.length);
    const tr = decodeJson(view.payload) as { instrument: string; qty: number; price: number };
    const p = positions.get(tr.instrument) ?? [0, 0];
    p[0] += tr.qty;
    p[1] += tr.qty * tr.price;
    positions.set(tr.instrument, p);
    trades++;
  }
  t.close();
  const timer = Tailer.open({ dir: partitionDir(topology, 'position-timer', 0) });
  timer.moveToEnd();
  const ticks = timer.index;
  timer.close();
  return {
    trades,
    ticks,
    positions: [...positions.entries()]
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
      .map(([i, [q, c]]) => [i, q, c]),
  };
}

async function main(): Promise<number> {
  const program = new Command()
    .option('--topology <file>', 'topology file', 'examples/positions/topology.output.yaml')
    .option('--trades <n>', 'trades appended per round', (v) => Number(v), 20000)
    .option(
      '--rounds <n>',
      'start/stop rounds (the 2nd and later are restarts)',
      (v) => Number(v),
      3,
    )
    .option('--fresh', 'delete the data directory first')
    .parse();
  const o = program.opts<{ topology: string; trades: number; rounds: number; fresh?: boolean }>();
  const topology = loadTopology(o.topology);
  if (o.fresh) fs.rmSync(topology.dataDir, { recursive: true, force: true });
  const writer = new EnvelopeWriter();
  const restartMs: number[] = [];
  let seed = 12345;
  const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296;
  // Trades already in the queue from earlier runs (without --fresh the example continues them).
  const tail = Tailer.open({ dir: partitionDir(topology, 'trades', 0) });
  tail.moveToEnd();
  const earlier = tail.index;
  tail.close();
  for (let round = 0; round < o.rounds; round++) {
    const appender = Appender.open({ dir: partitionDir(topology, 'trades', 0) });
    const batch: Uint8Array[] = [];
    for (let n = 0; n < o.trades; n++) {
      const instrument = INSTRUMENTS[Math.floor(random() * INSTRUMENTS.length)];
      const trade = {
        instrument,
        qty: Math.floor(random() * 200) - 100,
        price: 10000 + Math.floor(random() * 5000),
      };
      batch.push(
        writer.encode({
          type: EVENT_TYPE_JSON,
          key: instrument,
          eventTimeMs: Date.now(),
          payload: encodeJson(trade),
        }),
      );
    }
    appender.appendBatch(batch);
    appender.close();

    const t0 = performance.now();
    const running = await startTopology(topology, {
      log: (l) => process.stderr.write(`positions: ${l}\n`),
    });
    restartMs.push(Math.round(performance.now() - t0));
    const trades = earlier + round * o.trades + o.trades;
    for (;;) {
      const got = outputState(topology);
      if (got && got.trades === trades && got.ticks >= 3) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await running.stop();
  }
  const want = reference(topology);
  const got = outputState(topology);
  const match = JSON.stringify(got) === JSON.stringify(want);
  process.stdout.write(
    JSON.stringify({
      topology: topology.name,
      rounds: o.rounds,
      restartMs,
      trades: want.trades,
      ticks: want.ticks,
      match,
    }) + '\n',
  );
  if (!match)
    process.stderr.write(
      `positions: newest output ${JSON.stringify(got)}\n  reference ${JSON.stringify(want)}\n`,
    );
  return match ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`positions: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(2);
  },
);
