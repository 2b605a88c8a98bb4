/**
 * Child process for the journal crash tests. It is killed (SIGKILL) by the fault injected
 * through SLUICE_JOURNAL_FAULT or by the parent; whatever it leaves on disk is what a crash
 * leaves. Usage: node journal-crash.child.js <mode> <dir> [runId]
 *
 *   torn-record          append "hello", flush, append a 100-byte record, flush
 *                        (run with SLUICE_JOURNAL_FAULT=torn-write@2: dies mid-record, case Q1)
 *   torn-batch           append "hello", flush, appendBatch of three 1000-byte records, flush
 *                        (run with SLUICE_JOURNAL_FAULT=torn-write@2: dies mid-batch)
 *   torn-segment-header  segmentBytes 320: append m0 (100 B), flush, append 200 B (forces a roll)
 *                        (run with SLUICE_JOURNAL_FAULT=torn-segment-header@2: dies while
 *                        creating the second segment, case Q3)
 *   torn-claim-batch     claim+commit "hello", flush, a claimed batch (beginBatch, three
 *                        1000-byte claims, endBatch), flush (run with torn-write@2: dies
 *                        mid-batch)
 *   uncommitted-claim    claim+commit "hello", flush, claim 100 bytes and write them, then
 *                        kill itself (SIGKILL) before commit
 *   writer               appends batches forever; after each flush writes "flushed <nextIndex>\n"
 *                        to stdout (synchronously), so the parent knows what must survive
 */
import fs from 'node:fs';
import { Appender } from '../engine/journal/index.js';

/** Writer records: [runId u32][batch u32][i u32][n u32][filler]; decoded by journal-crash.test.ts. */
function encodeWriterRecord(
  runId: number,
  batch: number,
  i: number,
  n: number,
  fillerBytes: number,
): Uint8Array {
  const b = Buffer.alloc(16 + fillerBytes, (batch + i) & 0xff);
  b.writeUInt32LE(runId, 0);
  b.writeUInt32LE(batch, 4);
  b.writeUInt32LE(i, 8);
  b.writeUInt32LE(n, 12);
  return b;
}

/** One record through claim + commit (the encode-once path). */
function claimRecord(a: Appender, payload: Uint8Array): number {
  const off = a.claim(payload.length);
  a.claimBuffer.set(payload, off);
  return a.commit();
}

const [mode, dir, runIdArg] = process.argv.slice(2);

function say(line: string): void {
  fs.writeSync(1, line + '\n');
}

switch (mode) {
  case 'torn-record': {
    const a = Appender.open({ dir });
    a.append(Buffer.from('hello'));
    a.flush();
    a.append(Buffer.alloc(100, 0x78));
    a.flush();
    say('survived');
    break;
  }
  case 'torn-batch': {
    const a = Appender.open({ dir });
    a.append(Buffer.from('hello'));
    a.flush();
    a.appendBatch([Buffer.alloc(1000, 0x61), Buffer.alloc(1000, 0x62), Buffer.alloc(1000, 0x63)]);
    a.flush();
    say('survived');
    break;
  }
  case 'torn-claim-batch': {
    const a = Appender.open({ dir });
    claimRecord(a, Buffer.from('hello'));
    a.flush();
    a.beginBatch();
    for (const c of [0x61, 0x62, 0x63]) claimRecord(a, Buffer.alloc(1000, c));
    a.endBatch();
    a.flush();
    say('survived');
    break;
  }
  case 'uncommitted-claim': {
    const a = Appender.open({ dir });
    claimRecord(a, Buffer.from('hello'));
    a.flush();
    const off = a.claim(100);
    a.claimBuffer.fill(0x7a, off, off + 100);
    process.kill(process.pid, 'SIGKILL');
    break;
  }
  case 'torn-segment-header': {
    const a = Appender.open({ dir, segmentBytes: 320 });
    a.append(Buffer.from('m0'.padEnd(100, '.')));
    a.flush();
    a.append(Buffer.alloc(200, 0x6c));
    a.flush();
    say('survived');
    break;
  }
  case 'writer': {
    const runId = Number(runIdArg);
    const a = Appender.open({
      dir,
      fsync: 'none',
      segmentBytes: 512 * 1024,
      writeBufferBytes: 256 * 1024,
    });
    say(
      `ready ${a.nextIndex} truncated=${a.recovery.truncatedBytes} dropped=${a.recovery.droppedRecords}`,
    );
    let seed = runId * 7919 + 1;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    for (let batch = 0; ; batch++) {
      // Mostly small batches; now and then a large one, so kills land inside long writes.
      const big = rand(20) === 0;
      const n = big ? 200 + rand(300) : 1 + rand(30);
      const payloads: Uint8Array[] = [];
      for (let i = 0; i < n; i++)
        payloads.push(encodeWriterRecord(runId, batch, i, n, big ? 1024 : rand(300)));
      a.appendBatch(payloads);
      if (rand(3) === 0) {
        a.flush();
        say(`flushed ${a.nextIndex}`);
      }
    }
  }
  default:
    throw new Error(`unknown mode ${mode}`);
}
