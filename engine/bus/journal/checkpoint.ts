/**
 * The journal bus checkpoint file (`<dir>/checkpoint`): what the transaction log no longer has to
 * hold once a checkpoint made the partitions durable. JSON, replaced atomically (write a
 * temporary file, fsync, rename over, fsync the directory), so a reader finds the old or the new
 * one whole:
 * ```
 * { "format": "sluice-journal-bus-checkpoint", "version": 1,
 *   "seq": 1234,                          every transaction up to it is in the partition files
 *   "skipped": [[7, 9]],                  seq ranges whose batches never count (lost log entries)
 *   "committed": [["g", [["in:0", 42]]]], group positions of transactions up to `seq`
 *   "ends": [["in:0", 57]] }              partition end offsets (markers included)
 * ```
 * Partition keys are engine/bus/partitioner tpKey strings.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fsyncDir } from '../../journal/segment.js';

const FORMAT = 'sluice-journal-bus-checkpoint';
const VERSION = 1;

/** An inclusive range of transaction seqs. */
export interface SeqRange {
  from: number;
  to: number;
}

/** The contents of a checkpoint. */
export interface Checkpoint {
  seq: number;
  skipped: SeqRange[];
  /** groupId -> tpKey -> committed offset. */
  committed: Map<string, Map<string, number>>;
  /** tpKey -> end offset. */
  ends: Map<string, number>;
}

/** Writes `ck` to `file`, replacing the previous checkpoint atomically. */
export function writeCheckpoint(file: string, ck: Checkpoint): void {
  const body = JSON.stringify({
    format: FORMAT,
    version: VERSION,
    seq: ck.seq,
    skipped: ck.skipped.map((r) => [r.from, r.to]),
    committed: [...ck.committed].map(([g, m]) => [g, [...m]]),
    ends: [...ck.ends],
  });
  const tmp = `${file}.tmp`;
  const fd = fs.openSync(tmp, 'w');
  try {
    fs.writeFileSync(fd, body);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  fsyncDir(path.dirname(path.resolve(file)));
}

function isInt(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0;
}

/**
 * Reads the checkpoint at `file`; null when there is none (a new directory, or one written
 * before checkpoints existed). Throws Error naming the file and the field for a file that is not
 * a checkpoint of this version.
 */
export function readCheckpoint(file: string): Checkpoint | null {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  const bad = (field: string): Error =>
    new Error(`${file}: not a journal bus checkpoint of version ${VERSION}: bad field ${field}`);
  let j: Record<string, unknown>;
  try {
    j = JSON.parse(text) as Record<string, unknown>;
  } catch (e) {
    throw new Error(`${file}: not a journal bus checkpoint: ${(e as Error).message}`);
  }
  if (j?.format !== FORMAT) throw bad('format');
  if (j.version !== VERSION) throw bad('version');
  if (!isInt(j.seq)) throw bad('seq');
  if (!Array.isArray(j.skipped)) throw bad('skipped');
  const skipped = j.skipped.map((r: unknown, i: number) => {
    if (!Array.isArray(r) || !isInt(r[0]) || !isInt(r[1])) throw bad(`skipped[${i}]`);
    return { from: r[0], to: r[1] };
  });
  if (!Array.isArray(j.committed)) throw bad('committed');
  const committed = new Map<string, Map<string, number>>();
  j.committed.forEach((e: unknown, i: number) => {
    if (!Array.isArray(e) || typeof e[0] !== 'string' || !Array.isArray(e[1]))
      throw bad(`committed[${i}]`);
    const m = new Map<string, number>();
    for (const p of e[1] as unknown[]) {
      if (!Array.isArray(p) || typeof p[0] !== 'string' || !isInt(p[1]))
        throw bad(`committed[${i}]`);
      m.set(p[0], p[1]);
    }
    committed.set(e[0], m);
  });
  if (!Array.isArray(j.ends)) throw bad('ends');
  const ends = new Map<string, number>();
  j.ends.forEach((e: unknown, i: number) => {
    if (!Array.isArray(e) || typeof e[0] !== 'string' || !isInt(e[1])) throw bad(`ends[${i}]`);
    ends.set(e[0], e[1]);
  });
  return { seq: j.seq, skipped, committed, ends };
}
