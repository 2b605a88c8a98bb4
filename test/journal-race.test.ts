/**
 * A tailer reading a segment while its appender (another thread) writes it: read(2) and write(2)
 * on the same file race page by page, so a read can return a frame cut off mid-write with a
 * complete frame after it (the write reached the later page before the read did). That is a
 * write in progress, not damage: the tailer must return every record, in order, and never throw.
 * (Found by bench/pipeline.ts: the tailer used to throw JournalCorruptionError "damage, not a
 * torn tail" after a few hundred thousand records.)
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { Tailer, createQueueNotifier } from '../engine/journal/index.js';

const worker = new URL('./journal-race.worker.js', import.meta.url);
const RECORDS = 400_000;

test('a tailer racing a writing appender returns every record in order and never reports damage', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'perf_sluice-journal-race-'));
  try {
    const notifier = createQueueNotifier();
    const w = new Worker(worker, { workerData: { dir, records: RECORDS, notifier } });
    const exited = new Promise<number>((resolve, reject) => {
      w.on('error', reject);
      w.on('exit', resolve);
    });
    const t = Tailer.open({ dir, notifier });
    let n = 0;
    let done = false;
    // Read while the worker writes; the thread blocks only inside waitForAppend (bounded).
    while (!done) {
      assert.ok(t.waitForAppend(60_000), `records arrive (read ${n})`);
      for (let r = t.next(); r; r = t.next()) {
        if (r.bytes.length === 0) {
          done = true;
          break;
        }
        assert.is(r.index, n);
        assert.is(
          Buffer.from(r.bytes.buffer, r.bytes.byteOffset, 4).readUInt32LE(0),
          n,
          `record ${n} holds its index`,
        );
        n++;
      }
    }
    t.close();
    assert.is(n, RECORDS);
    assert.is(await exited, 0);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
