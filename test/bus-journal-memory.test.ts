/**
 * The journal bus holds bounded memory whatever the history: after a full GC, the heap of a bus
 * that has written and consumed 240,000 records is within 10 MiB of the same bus at 40,000
 * (the records themselves are 24 MiB of values), and every record reads back in order from the
 * segment files. Not timed; the throughput and rss at 10^6 and 10^7 records are in
 * bench/bus-memory.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createJournalBus, type BusBackend, type BusConsumer } from '../engine/bus/index.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const PARTITIONS = 2;
const MiB = 1024 * 1024;

async function write(bus: BusBackend, from: number, count: number): Promise<void> {
  const p = await bus.producer({ transactionalId: 'memory-test' });
  for (let i = from; i < from + count; i += 1000) {
    const t = await p.begin();
    await t.send(
      Array.from({ length: 1000 }, (_, j) => {
        const value = new Uint8Array(100);
        new DataView(value.buffer).setUint32(0, i + j);
        return { topic: 'h', key: `k${(i + j) % 100}`, value, partition: (i + j) % PARTITIONS };
      }),
    );
    await t.commit();
  }
  await p.close();
}

async function consume(c: BusConsumer, count: number, next: number[]): Promise<void> {
  for (let got = 0; got < count;) {
    const rs = await c.poll({ timeoutMs: 1000 });
    assert.ok(rs.length > 0, `records stop arriving after ${got} of ${count}`);
    for (const r of rs) {
      const seq = new DataView(r.value!.buffer, r.value!.byteOffset).getUint32(0);
      if (seq !== next[r.partition])
        assert.is(seq, next[r.partition], `partition ${r.partition} offset ${r.offset}`);
      next[r.partition] += PARTITIONS;
    }
    got += rs.length;
    if (c.groupId !== null) await c.commit();
  }
}

function heapAfterGc(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

test('heap after 240,000 records of history is within 10 MiB of the heap after 40,000', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bus-memory-'));
  try {
    const bus = await createJournalBus({
      dir,
      fsync: 'none',
      hotRecordsMax: 2000,
      checkpointBytes: 4 * MiB,
      segmentBytes: 4 * MiB,
    });
    await bus.createTopics([{ name: 'h', partitions: PARTITIONS }]);
    const c = await bus.consumer({ groupId: 'g' });
    await c.subscribe(['h']);
    const next = Array.from({ length: PARTITIONS }, (_, p) => p);
    await write(bus, 0, 40_000);
    await consume(c, 40_000, next);
    const small = heapAfterGc();
    await write(bus, 40_000, 200_000);
    await consume(c, 200_000, next);
    const large = heapAfterGc();
    assert.ok(
      large - small < 10 * MiB,
      `heap grew by ${((large - small) / MiB).toFixed(1)} MiB with 200,000 more records (${(small / MiB).toFixed(1)} -> ${(large / MiB).toFixed(1)} MiB)`,
    );
    // And all of it reads back from the files, from the start.
    const again = await bus.consumer();
    await again.assign(
      Array.from({ length: PARTITIONS }, (_, partition) => ({ topic: 'h', partition })),
    );
    await consume(
      again,
      240_000,
      Array.from({ length: PARTITIONS }, (_, p) => p),
    );
    assert.ok(
      fs.readdirSync(path.join(dir, 'txn')).filter((f) => f.endsWith('.seg')).length <= 3,
      'the transaction log was truncated',
    );
    await bus.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
