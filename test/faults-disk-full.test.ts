/**
 * Defects the fault suite (faults/) found with a full data directory, each fixed and tested here
 * on a real full file system (a small tmpfs mounted by the test; skipped where `mount -t tmpfs`
 * is refused):
 * - an appender whose write or roll failed with ENOSPC kept its failed frames buffered and, after
 *   a failed roll, the closed descriptors of the old segment (later writes hit whatever file got
 *   those numbers: EBADF, ESPIPE): retried appends damaged the segment ("checksum mismatch ...
 *   damage, not a torn tail") and the reading service failed forever. Now a failed appender
 *   refuses every call but close(), which writes nothing; a new appender recovers every complete
 *   record and goes on.
 * - the capture pump kept its appenders across an outage; it now closes them when the target
 *   fails and opens new ones when it reconnects (test: the bank shape of `npm run faults`).
 * - an appender lock taken while the disk was full left an empty lock file (created, its pid not
 *   written), which the next opener read as a lock being created: the group's restart after the
 *   outage failed with "queue is locked by live process 0". Now the lock file is removed.
 * - `sluice run --http` exited with code 1 when the disk was full at the end of a statistics
 *   interval (seed 538597 of the CI subset): the statistics recorder appends one record per
 *   minute from the sampler's timer, and the ENOSPC thrown there was uncaught. Now the recorder
 *   keeps the intervals in memory, says once that the journal cannot be written, and writes them
 *   (each exactly once) when the disk has room again.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Appender, Tailer } from '../engine/journal/index.js';
import { Tmpfs } from '../faults/harness.js';
import {
  loadTopology,
  startTopology,
  openQueueAppender,
  partitionDir,
  type RunningTopology,
} from '../index.js';
import { readStats } from '../ops/index.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'faults_diskfull_'));
const available = Tmpfs.available(path.join(root, 'probe'));

function payload(i: number): Uint8Array {
  return new TextEncoder().encode(`record ${i} `.padEnd(3000, 'x'));
}

test('an appender that hit ENOSPC refuses later appends; a new one recovers every complete record and goes on', () => {
  if (!available) {
    console.log('  (skipped: mount -t tmpfs refused here)');
    return;
  }
  const disk = new Tmpfs(path.join(root, 'disk'), 4 * 1048576);
  disk.mount();
  try {
    const dir = path.join(disk.dir, 'q');
    // Small segments, so that the failure can land in a roll as well as in a write.
    let a = Appender.open({ dir, segmentBytes: 65536 });
    let written = 0;
    let failure: Error | null = null;
    disk.fill();
    // Free a little: some batches fit, then ENOSPC in the middle of one.
    fs.truncateSync(
      path.join(disk.dir, 'faults-filler'),
      fs.statSync(path.join(disk.dir, 'faults-filler')).size - 200_000,
    );
    for (let i = 0; i < 1000 && !failure; i++) {
      try {
        a.appendBatch([payload(written), payload(written + 1)]);
        a.flush();
        written += 2;
      } catch (e) {
        failure = e as Error;
      }
    }
    assert.ok(failure, 'the file system never filled');
    assert.match(failure!.message, /ENOSPC|no space/);
    assert.throws(
      () => a.appendBatch([payload(0)]),
      /failed earlier .*ENOSPC|failed earlier .*no space/,
    );
    assert.throws(() => a.flush(), /failed earlier/);
    a.close(); // writes nothing, releases the lock
    disk.free();
    a = Appender.open({ dir, segmentBytes: 65536 });
    const recovered = a.nextIndex;
    assert.ok(recovered >= written, `recovered ${recovered} records, ${written} were flushed`);
    for (let i = recovered; i < recovered + 100; i++) a.append(payload(i));
    a.close();
    const t = Tailer.open({ dir });
    let n = 0;
    for (let rec = t.next(); rec; rec = t.next()) {
      assert.is(rec.index, n);
      assert.equal(
        new TextDecoder().decode(rec.bytes).split(' ')[1],
        String(n),
        `record ${n} holds another record's payload`,
      );
      n++;
    }
    t.close();
    assert.is(n, recovered + 100);
  } finally {
    disk.unmount();
  }
});

test('an appender lock refused by a full disk leaves no lock file behind', () => {
  if (!available) {
    console.log('  (skipped: mount -t tmpfs refused here)');
    return;
  }
  const disk = new Tmpfs(path.join(root, 'lock-disk'), 1048576);
  disk.mount();
  try {
    const dir = path.join(disk.dir, 'q');
    fs.mkdirSync(dir);
    disk.fill();
    assert.throws(() => Appender.open({ dir }), /ENOSPC|no space/);
    assert.not.ok(fs.existsSync(path.join(dir, 'appender.lock')), 'an empty lock file was left');
    disk.free();
    const a = Appender.open({ dir }); // at once: not "locked by live process 0"
    a.append(payload(0));
    a.close();
  } finally {
    disk.unmount();
  }
});

test('a full disk at the end of statistics intervals neither stops the topology nor loses or repeats an interval', async () => {
  if (!available) {
    console.log('  (skipped: mount -t tmpfs refused here)');
    return;
  }
  const disk = new Tmpfs(path.join(root, 'stats-disk'), 16 * 1048576);
  disk.mount();
  const lines: string[] = [];
  let running: RunningTopology | null = null;
  const uncaught: Error[] = [];
  const onUncaught = (e: Error) => uncaught.push(e);
  // Before the fix the ENOSPC ended the process from the sampler's timer; caught here so the
  // test says so instead of dying.
  process.on('uncaughtException', onUncaught);
  try {
    const file = path.join(root, 'stats-topology.yaml');
    const sum = new URL('./fixtures/services/running-sum.js', import.meta.url).pathname;
    fs.writeFileSync(
      file,
      `name: faults-stats-disk-full
dataDir: ${JSON.stringify(path.join(disk.dir, 'data'))}
supervisor: { backoffMaxMs: 200 }
queues:
  - { name: in, segmentBytes: 1048576 }
  - { name: sums, segmentBytes: 1048576 }
services:
  - { name: sum, module: ${JSON.stringify(sum)}, inputs: [in], output: sums }
`,
    );
    const t = loadTopology(file);
    const intervalMs = 200; // ended at the sampler's samples (1 s apart)
    running = await startTopology(t, {
      stats: { intervalMs, hourIntervals: 1000, condenseAfterMs: 86_400_000 },
      log: (l) => lines.push(l),
    });
    const input = openQueueAppender(t, 'in');
    for (let i = 0; i < 50; i++) input.appendJson(`k${i % 5}`, { v: 1, n: i });
    input.flush();
    input.close();
    const windowsWritten = () =>
      readStats(t.dataDir, { fromMs: 0, toMs: Infinity, step: 'minute' }, 1000 * intervalMs)
        .find((s) => s.name === 'service:sum')
        ?.points.map((p) => p.startMs) ?? [];
    while (windowsWritten().length < 2) await new Promise((r) => setTimeout(r, 50));
    disk.fill();
    // Three interval ends while nothing can be written, seen in the recorder itself (no timing).
    const recorder = running.ops.stats!;
    let kept: number[] = [];
    const fullMs = Date.now();
    while (uncaught.length === 0 && (kept = recorder.pendingStartsMs).length < 3) {
      assert.ok(Date.now() - fullMs < 120_000, `no interval kept:\n${lines.join('\n')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(
      uncaught.map((e) => e.message),
      [],
      'an error thrown from a timer (it ends `sluice run`)',
    );
    assert.ok(lines.some((l) => /stats: cannot write the statistics journal in .*ENOSPC/.test(l)));
    disk.free();
    const freedMs = Date.now();
    while (!lines.some((l) => /stats: the statistics journal is written again/.test(l))) {
      // A bound against hanging only: the next sample (1 s) writes them.
      assert.ok(Date.now() - freedMs < 120_000, `not written again:\n${lines.join('\n')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(recorder.pendingStartsMs, []);
    // The intervals kept while the disk was full are in the journal once each (none lost, none
    // written again after a failed write that did land), in order.
    const starts = windowsWritten();
    for (const s of kept) assert.is(starts.filter((x) => x === s).length, 1, `interval ${s}`);
    for (let i = 1; i < starts.length; i++)
      assert.ok(starts[i]! > starts[i - 1]!, `intervals written: ${starts.join(', ')}`);
    // Still running: stops cleanly, every input with its output.
    const result = await running.stop();
    running = null;
    assert.equal(result.terminated, []);
    const out = Tailer.open({ dir: partitionDir(t, 'sums', 0) });
    let n = 0;
    while (out.next()) n++;
    out.close();
    assert.is(n, 50);
  } finally {
    process.off('uncaughtException', onUncaught);
    await running?.stop().catch(() => undefined);
    disk.unmount();
  }
});

test.after(() => fs.rmSync(root, { recursive: true, force: true }));

test.run();
