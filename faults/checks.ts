/**
 * Invariant checkers of the fault suite, incremental: each keeps its tailers open and reads only
 * what was appended since its last call, so it can run after every fault.
 *
 * - {@link CaptureChecker}: a capture target's partitions. Each change once (its staging id, never
 *   reused, seen once across every target of the source) and per key in staging-id order (a key's
 *   changes go through one pump, which ships them in staging-id order).
 * - {@link CauseChecker}: a service output whose every input has exactly one output. Per input
 *   partition the outputs' causes are 0, 1, 2, ... in order: a gap is an input lost, a repeat an
 *   effect duplicated, a step back a broken per-partition order.
 */
import { Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  decodeChange,
  queueId,
} from '../engine/codec/index.js';

/** One partition's tailer, opened lazily (the directory may not exist yet). */
class PartitionReader {
  private tailer: Tailer | null = null;
  constructor(readonly dir: string) {}

  /** Calls `each` for every record appended since the last call. */
  read(each: (bytes: Uint8Array, index: number) => void): void {
    this.tailer ??= Tailer.open({ dir: this.dir });
    for (let rec = this.tailer.next(); rec; rec = this.tailer.next()) each(rec.bytes, rec.index);
  }

  /** Records read so far (the queue index of the next one). */
  get count(): number {
    return this.tailer?.index ?? 0;
  }

  close(): void {
    this.tailer?.close();
    this.tailer = null;
  }
}

/** A capture target partition to check: its queue name, partition and directory. */
export interface PartitionRef {
  queue: string;
  partition: number;
  dir: string;
}

/** See the file comment. */
export class CaptureChecker {
  private readonly readers: { ref: PartitionRef; reader: PartitionReader }[];
  private readonly seen = new Set<string>();
  private readonly lastIdByKey = new Map<string, bigint>();
  private readonly view = new EnvelopeView();
  /** Changes read, by table and operation (`pgbench_history/insert`). */
  readonly counts = new Map<string, number>();

  constructor(partitions: PartitionRef[]) {
    this.readers = partitions.map((ref) => ({ ref, reader: new PartitionReader(ref.dir) }));
  }

  /** Reads what is new; returns one line per violation found. */
  check(): string[] {
    const problems: string[] = [];
    for (const { ref, reader } of this.readers) {
      try {
        reader.read((bytes, index) => {
          this.view.wrap(bytes, 0, bytes.length);
          if (this.view.type !== EVENT_TYPE_CHANGE) return;
          const ch = decodeChange(this.view.payload);
          const at = `${ref.queue}/${ref.partition} index ${index}`;
          if (this.seen.has(ch.stagingId))
            problems.push(
              `${at}: staging id ${ch.stagingId} (${ch.table} ${ch.op} key ${ch.key}) is in the targets twice (a duplicated change)`,
            );
          this.seen.add(ch.stagingId);
          const key = `${ch.table}|${ch.key}`;
          const id = BigInt(ch.stagingId);
          const last = this.lastIdByKey.get(key);
          if (last !== undefined && id <= last)
            problems.push(
              `${at}: ${ch.table} key ${ch.key}: staging id ${id} after ${last} (per-key order broken)`,
            );
          this.lastIdByKey.set(key, id);
          const c = `${ch.table}/${ch.op}`;
          this.counts.set(c, (this.counts.get(c) ?? 0) + 1);
        });
      } catch (e) {
        problems.push(`${ref.queue}/${ref.partition}: reading failed: ${(e as Error).message}`);
      }
    }
    return problems;
  }

  /** Records read per partition, by `queue/partition`. */
  lengths(): Map<string, number> {
    return new Map(
      this.readers.map(({ ref, reader }) => [`${ref.queue}/${ref.partition}`, reader.count]),
    );
  }

  close(): void {
    for (const { reader } of this.readers) reader.close();
  }
}

/** See the file comment. */
export class CauseChecker {
  private readonly reader: PartitionReader;
  private readonly view = new EnvelopeView();
  /** Next cause index due, by `queue/partition` of the input. */
  readonly next = new Map<string, number>();
  private readonly names = new Map<number, string>();

  /** `output`: the output partition's directory; `inputs`: the input queue names. */
  constructor(
    readonly label: string,
    output: string,
    inputs: string[],
  ) {
    this.reader = new PartitionReader(output);
    for (const q of inputs) this.names.set(queueId(q), q);
  }

  /** Reads what is new; returns one line per violation found. */
  check(): string[] {
    const problems: string[] = [];
    try {
      this.reader.read((bytes, index) => {
        this.view.wrap(bytes, 0, bytes.length);
        if (this.view.type !== EVENT_TYPE_JSON) return;
        const q = this.names.get(this.view.causeQueue);
        const at = `${this.label} output index ${index}`;
        if (q === undefined) {
          problems.push(`${at}: cause queue id ${this.view.causeQueue} is none of the inputs`);
          return;
        }
        const k = `${q}/${this.view.causePartition}`;
        const due = this.next.get(k) ?? 0;
        const got = this.view.causeIndex;
        if (got !== due) {
          const what =
            got < due
              ? 'a duplicated effect or a step back'
              : `input(s) ${due}..${got - 1} without an effect (lost)`;
          problems.push(`${at}: output for ${k} index ${got} where ${due} was due (${what})`);
        }
        this.next.set(k, Math.max(due, got + 1));
      });
    } catch (e) {
      problems.push(`${this.label}: reading the output failed: ${(e as Error).message}`);
    }
    return problems;
  }

  close(): void {
    this.reader.close();
  }
}
