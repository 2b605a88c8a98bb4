/**
 * Restart time per strategy and history length (issue 3): for histories of 10^5, 10^6 and 10^7
 * input events, the time from `startTopology()` to live (workers spawned, positions found,
 * state restored and replayed) of a positions service over two input queues, for
 * LAST_WRITTEN without replay, INPUTS, OUTPUT, OUTPUT_REVERSE, snapshots (+ OUTPUT) and the
 * key-value store (10^4 accounts, a timer event every 10^3 inputs writing 10^3 entries of a
 * snapshot cycle, so a cycle spans 10^4 inputs).
 *
 *   node dist/bench/restart.js [maxHistory] [strategies]   (default 10000000, all)
 *
 * `strategies`: a ';'-separated subset of the names below (e.g. `INPUTS;OUTPUT`); only the
 * histories they need are written.
 *
 * The history is written straight to the journals, as the service host would have written it:
 * binary trades (type 100, 8 bytes) alternating in runs of 256 per queue, one output per trade
 * (type 101 with its cause), a processed record per 512-input batch, a snapshot (type 150)
 * every 10^4 inputs. The same history serves every strategy (a restart with nothing new to
 * process appends nothing). Goals: snapshots flat (< 2x from 10^5 to 10^7); INPUTS replay
 * >= 10^6 events/s. Bound: INPUTS replay reads each input once (journal read + envelope wrap +
 * handler, ~100-300 ns); OUTPUT also reads every output once.
 */
import fs from 'node:fs';
import os, { loadavg } from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology } from '../index.js';
import { Appender } from '../engine/journal/index.js';
import { EnvelopeWriter, queueId } from '../engine/codec/index.js';
import {
  EVENT_TYPE_PROCESSED,
  KvStore,
  ProcessedRecorder,
  encodeSnapshot,
  encodeTimer,
} from '../engine/replay/index.js';
import { markdownTable, machineLine, si, isMainModule } from './lib/report.js';

const RUN_INPUTS = 256;
/** Restarts measured per (history, strategy) cell; the median is reported. */
const RESTARTS_PER_CELL = 3;
const SNAPSHOT_EVERY_INPUTS = 10_000;
const INSTRUMENTS = 64;
const FLUSH_RECORDS = 65_536;
const fixture = (name: string) =>
  new URL(`../test/fixtures/services/${name}.js`, import.meta.url).pathname;

const STRATEGIES = [
  { name: 'LAST_WRITTEN, no replay', module: 'bench-positions', inputsReplay: 'NONE' },
  { name: 'INPUTS', module: 'bench-positions', inputsReplay: 'INPUTS' },
  { name: 'OUTPUT', module: 'bench-positions', inputsReplay: 'OUTPUT' },
  { name: 'OUTPUT_REVERSE', module: 'bench-positions', inputsReplay: 'OUTPUT_REVERSE' },
  { name: 'snapshots + OUTPUT', module: 'bench-positions-snapshot', inputsReplay: 'OUTPUT' },
  { name: 'key-value store', module: 'bench-positions-kv', inputsReplay: 'NONE' },
] as const;

/** Key-value store history: accounts in the map, inputs between two timer events. */
const KV_ACCOUNTS = 10_000;
const KV_TIMER_EVERY_INPUTS = 1000;
const KV_SNAPSHOT_BATCH = 1000;

/** Writes a history of `n` inputs (n/2 per queue) and the outputs the host would have written. */
function writeHistory(dataDir: string, n: number): void {
  const queues = ['a', 'b'];
  const inputs = queues.map((q) => ({ queue: q, partition: 0 }));
  const writer = new EnvelopeWriter();
  const ins = queues.map((q) =>
    Appender.open({ dir: path.join(dataDir, 'queues', q, '0'), fsync: 'none' }),
  );
  const out = Appender.open({ dir: path.join(dataDir, 'queues', 'out', '0'), fsync: 'none' });
  const recorder = new ProcessedRecorder(inputs, [-1, -1]);
  const qids = queues.map((q) => queueId(q));
  const positions = new Float64Array(INSTRUMENTS);
  const payload = new Uint8Array(8);
  const pv = new DataView(payload.buffer);
  const outPayload = new Uint8Array(12);
  const ov = new DataView(outPayload.buffer);
  const next = [0, 0];
  let done = 0;
  let sinceSnapshot = 0;
  let seed = 1;
  const batch: Uint8Array[] = [];
  const inBatches: Uint8Array[][] = [[], []];
  while (done < n) {
    for (let q = 0; q < 2 && done < n; q++) {
      for (let r = 0; r < RUN_INPUTS && done < n; r++, done++) {
        seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
        const instrument = (seed >>> 16) % INSTRUMENTS;
        const qty = ((seed >>> 4) % 200) - 100;
        pv.setUint32(0, instrument, true);
        pv.setInt32(4, qty, true);
        const index = next[q]++;
        inBatches[q].push(writer.encode({ type: 100, eventTimeMs: 0, payload }));
        positions[instrument] += qty;
        ov.setUint32(0, instrument, true);
        ov.setFloat64(4, positions[instrument], true);
        batch.push(
          writer.encode({
            type: 101,
            key: '',
            eventTimeMs: 0,
            causeQueue: qids[q],
            causePartition: 0,
            causeIndex: index,
            payload: outPayload,
          }),
        );
        recorder.note(q, index);
        sinceSnapshot++;
      }
    }
    batch.push(writer.encode({ type: EVENT_TYPE_PROCESSED, payload: recorder.take() }));
    if (sinceSnapshot >= SNAPSHOT_EVERY_INPUTS) {
      const f = new Float64Array(INSTRUMENTS + 1);
      f.set(positions);
      f[INSTRUMENTS] = done;
      for (const e of encodeSnapshot(
        writer,
        150,
        new Uint8Array(f.buffer),
        { 'a/0': recorder.positions[0], 'b/0': recorder.positions[1] },
        0,
      ))
        batch.push(e);
      sinceSnapshot = 0;
    }
    for (let q = 0; q < 2; q++) {
      if (inBatches[q].length > 0) ins[q].appendBatch(inBatches[q]);
      inBatches[q].length = 0;
    }
    out.appendBatch(batch);
    batch.length = 0;
    if (done % FLUSH_RECORDS < 2 * RUN_INPUTS) {
      for (const a of ins) a.flush();
      out.flush();
    }
  }
  for (const a of ins) a.close();
  out.close();
}

/**
 * The key-value store's history of `n` trades as the host writes it: per trade a put (the
 * account's new position) stamped with the trade, a processed record per batch, and every
 * 1000 inputs a timer event (queue `t`) that writes the next 1000 entries of a snapshot cycle.
 */
function writeKvHistory(dataDir: string, n: number): void {
  const queues = ['a', 'b', 't'];
  const inputs = queues.map((q) => ({ queue: q, partition: 0 }));
  const writer = new EnvelopeWriter();
  const ins = queues.map((q) =>
    Appender.open({ dir: path.join(dataDir, 'queues', q, '0'), fsync: 'none' }),
  );
  const out = Appender.open({ dir: path.join(dataDir, 'queues', 'out', '0'), fsync: 'none' });
  const recorder = new ProcessedRecorder(inputs, [-1, -1, -1]);
  const qids = queues.map((q) => queueId(q));
  const batch: Uint8Array[] = [];
  let cause = { queue: 0, partition: 0, index: 0 };
  const store = new KvStore(
    writer,
    (e) => batch.push(e),
    () => cause,
    KV_SNAPSHOT_BATCH,
  );
  const payload = new Uint8Array(8);
  const pv = new DataView(payload.buffer);
  const next = [0, 0, 0];
  let done = 0;
  let seed = 7;
  while (done < n) {
    for (let q = 0; q < 2 && done < n; q++) {
      for (let r = 0; r < RUN_INPUTS && done < n; r++, done++) {
        seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
        const account = (seed >>> 8) % KV_ACCOUNTS;
        const qty = ((seed >>> 4) % 200) - 100;
        pv.setUint32(0, account, true);
        pv.setInt32(4, qty, true);
        const index = next[q]++;
        ins[q].append(writer.encode({ type: 100, eventTimeMs: 0, payload }));
        cause = { queue: qids[q], partition: 0, index };
        const key = `a${account}`;
        store.put(key, (store.get<number>(key) ?? 0) + qty);
        recorder.note(q, index);
        if (done % KV_TIMER_EVERY_INPUTS === KV_TIMER_EVERY_INPUTS - 1) {
          const t = next[2]++;
          ins[2].append(encodeTimer(writer, t, 1000, 0));
          cause = { queue: qids[2], partition: 0, index: t };
          store.onTimer();
          recorder.note(2, t);
        }
      }
    }
    batch.push(writer.encode({ type: EVENT_TYPE_PROCESSED, payload: recorder.take() }));
    out.appendBatch(batch);
    batch.length = 0;
    if (done % FLUSH_RECORDS < 2 * RUN_INPUTS) {
      for (const a of ins) a.flush();
      out.flush();
    }
  }
  for (const a of ins) a.close();
  out.close();
}

/** One restart: ms from startTopology() to live, and the events the service replayed. */
async function restartOnce(
  dir: string,
  dataDir: string,
  s: (typeof STRATEGIES)[number],
): Promise<{ ms: number; replayed: number }> {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: restart-bench',
      `dataDir: ${dataDir}`,
      'queues:',
      '  - { name: a }',
      '  - { name: b }',
      '  - { name: t }',
      '  - { name: out }',
      'services:',
      '  - name: positions',
      `    module: ${fixture(s.module)}`,
      `    inputs: [${s.module.endsWith('kv') ? 'a, b, t' : 'a, b'}]`,
      '    output: out',
      `    inputsReplay: ${s.inputsReplay}`,
      ...(s.module.endsWith('snapshot')
        ? [`    settings: { snapshotEveryInputs: ${SNAPSHOT_EVERY_INPUTS} }`]
        : []),
      '',
    ].join('\n'),
  );
  const topology = loadTopology(file);
  const t0 = performance.now();
  const running = await startTopology(topology, {
    log: (l) => process.stderr.write(`restart bench: ${l}\n`),
  });
  const ms = performance.now() - t0;
  const replayed = running.supervisor.counters()['service:positions']?.replayed ?? -1;
  await running.stop();
  return { ms, replayed };
}

/**
 * Runs the benchmark for histories 10^5 .. `maxHistory` (powers of ten) and returns a markdown
 * section: one row per strategy, restart ms per history length, replayed events, replay rate.
 */
export async function runRestartBench(
  maxHistory = 10_000_000,
  only?: readonly string[],
): Promise<string> {
  const histories = [100_000, 1_000_000, 10_000_000].filter((h) => h <= maxHistory);
  const unknown = (only ?? []).filter((n) => !STRATEGIES.some((s) => s.name === n));
  if (unknown.length > 0)
    throw new Error(
      `unknown strategies ${unknown.join(', ')} (known: ${STRATEGIES.map((s) => s.name).join(', ')})`,
    );
  const chosen = STRATEGIES.filter((s) => !only || only.includes(s.name));
  const needKv = chosen.some((s) => s.module.endsWith('kv'));
  const needPlain = chosen.some((s) => !s.module.endsWith('kv'));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-restart-bench-'));
  const results = new Map<string, { ms: number; replayed: number }[]>();
  const writeMs: number[] = [];
  try {
    for (const n of histories) {
      const dataDir = path.join(dir, `h${n}`);
      const t0 = performance.now();
      if (needPlain) writeHistory(dataDir, n);
      if (needKv) writeKvHistory(`${dataDir}-kv`, n);
      writeMs.push(performance.now() - t0);
      for (const s of chosen) {
        // median of RESTARTS_PER_CELL restarts: a shared machine's noise moves single runs
        const runs: { ms: number; replayed: number }[] = [];
        for (let k = 0; k < RESTARTS_PER_CELL; k++)
          runs.push(await restartOnce(dir, s.module.endsWith('kv') ? `${dataDir}-kv` : dataDir, s));
        runs.sort((x, y) => x.ms - y.ms);
        const r = runs[runs.length >> 1];
        const list = results.get(s.name) ?? [];
        list.push(r);
        results.set(s.name, list);
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
      fs.rmSync(`${dataDir}-kv`, { recursive: true, force: true });
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const header = [
    'strategy',
    ...histories.map((h) => `${si(h)} events: ms (replayed)`),
    `${si(histories[histories.length - 1])} / ${si(histories[0])}`,
    'replayed / restart time at the largest',
    'replayed / (restart - no-replay restart)',
  ];
  const none = results.get(STRATEGIES[0].name);
  const rows = chosen.map((s) => {
    const list = results.get(s.name)!;
    const last = list[list.length - 1];
    const rate = last.replayed > 0 ? `${si((last.replayed / last.ms) * 1000)} events/s` : '-';
    // The replay's own rate: the restart without replay (same history, same run) is the
    // fixed cost of spawning workers and finding positions.
    const base = none?.[none.length - 1]?.ms;
    const net =
      last.replayed > 0 && base !== undefined && last.ms > base && s !== STRATEGIES[0]
        ? `${si((last.replayed / (last.ms - base)) * 1000)} events/s`
        : '-';
    return [
      s.name,
      ...list.map((r) => `${r.ms.toFixed(0)} (${si(r.replayed)})`),
      `${(last.ms / list[0].ms).toFixed(2)}x`,
      rate,
      net,
    ];
  });
  return [
    `### Restart time (startTopology() to live), positions service over 2 input queues`,
    '',
    `${machineLine()}; 1-minute load average ${loadavg()[0].toFixed(1)} at the end.`,
    '',
    markdownTable(header, rows),
    '',
    `History written straight to the journals (fsync none) in ${writeMs.map((m) => `${(m / 1000).toFixed(1)} s`).join(', ')}; ` +
      `snapshot every ${si(SNAPSHOT_EVERY_INPUTS)} inputs; key-value store: ${si(KV_ACCOUNTS)} keys, cycles of ${si(KV_SNAPSHOT_BATCH)} entries per timer event every ${si(KV_TIMER_EVERY_INPUTS)} inputs ("replayed" = store records applied); OUTPUT_REVERSE stops once all ${INSTRUMENTS} instruments are seen; ` +
      `"replayed" = the service's replayed counter (inputs, or outputs for OUTPUT_REVERSE). Median of ${RESTARTS_PER_CELL} restarts per cell.`,
    '',
  ].join('\n');
}

if (isMainModule(import.meta.url)) {
  const only = process.argv[3]
    ?.split(';')
    .map((x) => x.trim())
    .filter((x) => x.length > 0);
  console.log(await runRestartBench(Number(process.argv[2] ?? 10_000_000), only));
  process.exit(0);
}
