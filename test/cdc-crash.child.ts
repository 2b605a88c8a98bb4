/**
 * Child process for the C2 crash test: one pump (0 of 1) with a file-backed sink runs start()
 * and one cycle, then prints `{"reconciled":n,"shipped":m}`. With SLUICE_FAULT=after-append the
 * pump core SIGKILLs this process after the append and before the ack.
 *
 * The sink is a plain append-only JSON-lines file, written and fsynced per batch: enough for THIS
 * test of the pump core (the real target is the journal, wired in by the pump actor). A batch is
 * one write() of whole lines, so a crash after the fsync leaves whole lines.
 *
 * argv[2]: JSON { source: CaptureSource, sinkFile: string }
 */
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import { openStaging, PumpCore } from '../engine/cdc/index.js';
import type { CaptureSource, PumpSink, StagedChange } from '../engine/cdc/index.js';

const { source, sinkFile } = JSON.parse(process.argv[2]!) as {
  source: CaptureSource;
  sinkFile: string;
};

const sink: PumpSink = {
  appendBatch(changes: StagedChange[]) {
    const fd = openSync(sinkFile, 'a');
    try {
      writeSync(fd, changes.map((c) => JSON.stringify(c) + '\n').join(''));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  },
  recentStagingIds(limit: number) {
    if (!existsSync(sinkFile)) return new Set();
    const lines = readFileSync(sinkFile, 'utf8')
      .split('\n')
      .filter((l) => l.length > 0);
    return new Set(lines.slice(-limit).map((l) => (JSON.parse(l) as StagedChange).stagingId));
  },
};

const staging = await openStaging(source);
try {
  const core = new PumpCore({
    staging,
    sink,
    pump: 0,
    pumps: 1,
    batchSizeMax: source.batchSizeMax,
  });
  const reconciled = await core.start();
  const shipped = await core.runCycle();
  process.stdout.write(JSON.stringify({ reconciled, shipped }) + '\n');
} finally {
  await staging.close();
}
