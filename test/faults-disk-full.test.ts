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
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Appender, Tailer } from '../engine/journal/index.js';
import { Tmpfs } from '../faults/harness.js';

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

test.after(() => fs.rmSync(root, { recursive: true, force: true }));

test.run();
