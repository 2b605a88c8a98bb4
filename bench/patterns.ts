/**
 * Pattern benchmark: records/s of the durable pattern (consume 100-byte records, one output per
 * input, outputs + positions in one transaction) on the memory and journal backends.
 *
 * Method: one input topic of 4 partitions pre-filled with N records (keys `k<i % 1000>`, 100-byte
 * values, sends of 1000); the clock starts when the durable subscription is ready and stops when
 * it has committed every input. `batch` = `batchSizeMax` (records per poll and per onNext call;
 * default 500, the bus default); `commitRecordsMax` is the pattern default (5000): batches polled
 * while the previous commit syncs join the next transaction (group commit), so the column
 * `records/commit` (inputs per transaction, averaged) shows how many records one sync covered.
 * Journal: fsync 'batch' (the default: one fdatasync of the transaction log per commit, on the
 * thread pool) and 'none', a fresh temp directory each. The main thread waits for the end with
 * 1 ms timers, not a setImmediate spin, which would take a core from the thread pool's sync.
 *
 * Run: `node dist/bench/patterns.js` (prints a markdown table). Env PATTERN_BENCH_RECORDS
 * overrides N (default 200000). Kafka (mock) is not measured yet.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { createJournalBus, createMemoryBus, type BusBackend } from '../engine/bus/index.js'
import { bytesCodec, startDurable } from '../engine/patterns/index.js'

const VALUE_BYTES = 100
const PARTITIONS = 4

/** Runs the durable pattern over `records` inputs; returns records/s (processing + commit) and inputs per transaction. */
async function durableRate(bus: BusBackend, records: number, batchSizeMax: number): Promise<{ rate: number; perCommit: number }> {
  await bus.createTopics([{ name: 'in', partitions: PARTITIONS }, { name: 'out', partitions: PARTITIONS }])
  const p = await bus.producer()
  const value = new Uint8Array(VALUE_BYTES).fill(0x61)
  for (let i = 0; i < records; i += 1000) {
    await p.send(Array.from({ length: Math.min(1000, records - i) }, (_, j) => ({ topic: 'in', key: `k${(i + j) % 1000}`, value })))
  }
  await p.close()
  const sub = startDurable({
    bus, groupId: 'bench', topics: ['in'], transactionalId: 'bench-1', codec: bytesCodec, batchSizeMax,
    processor: { onNext: (rs) => rs.map((r) => ({ topic: 'out', key: r.key, value: r.value })) },
  })
  await sub.ready
  const t0 = performance.now()
  while (sub.stats.recordsCommitted < records) await new Promise((r) => setTimeout(r, 1))
  const ms = performance.now() - t0
  const perCommit = Math.round(sub.stats.recordsCommitted / sub.stats.batchesCommitted)
  await sub.stop()
  await bus.close()
  return { rate: Math.round(records / (ms / 1000)), perCommit }
}

export async function main(): Promise<string> {
  const records = Number(process.env.PATTERN_BENCH_RECORDS ?? 200_000)
  const rows: string[] = ['| pattern | backend | records | batch | records/commit | records/s |', '|---|---|---:|---:|---:|---:|']
  const row = (backend: string, batch: number, r: { rate: number; perCommit: number }): string => `| durable | ${backend} | ${records} | ${batch} | ${r.perCommit} | ${r.rate} |`
  for (const batch of [500]) {
    rows.push(row('memory', batch, await durableRate(createMemoryBus(), records, batch)))
    for (const fsync of ['batch', 'none'] as const) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-patterns-'))
      try {
        rows.push(row(`journal (fsync ${fsync})`, batch, await durableRate(await createJournalBus({ dir, fsync }), records, batch)))
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }
  }
  return rows.join('\n')
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) console.log(await main())
