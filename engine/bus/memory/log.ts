import type { BusRecord, ConsumedRecord } from '../types.js';

/** log2 of {@link LOG_CHUNK_ENTRIES}. */
const LOG_CHUNK_BITS = 12;
/** Entries per chunk of a {@link PartitionLog}'s arrays. */
export const LOG_CHUNK_ENTRIES = 1 << LOG_CHUNK_BITS;
const LOG_CHUNK_MASK = LOG_CHUNK_ENTRIES - 1;

/** The state of one transaction, shared by every partition it wrote to. */
export interface TxnState {
  status: 'open' | 'committed' | 'aborted';
}

/**
 * The records of a partition that are no longer held in memory, read back from the durable store
 * (engine/bus/journal reads them from the partition's segment files). Everything below the
 * log's hot window is decided, so a cold read needs no transaction state.
 */
export interface ColdPartition {
  /**
   * Reads visible records with offsets in [from, to) into `out`, at most `recordsMax`, in offset
   * order. Returns the position after the last returned record and after the invisible offsets
   * that follow it: the offset of the next visible record below `to`, else `to`.
   */
  read(
    topic: string,
    partition: number,
    from: number,
    to: number,
    recordsMax: number,
    out: ConsumedRecord[],
  ): number;
  /** Makes every record handed to the store so far readable by {@link read}. */
  flush(): void;
  /** First offset still stored (retention moves it up). */
  startOffset(): number;
}

/** Bounds of the part of a partition held in memory when it has a {@link ColdPartition}. */
export interface HotWindowLimits {
  /** Most offsets held in memory; older decided ones are dropped (read back cold). */
  recordsMax: number;
  /** Most bytes of keys and values held in memory (approximate: 64 bytes per entry added). */
  bytesMax: number;
}

/** Approximate memory of one held entry besides its key and value bytes. */
const ENTRY_OVERHEAD_BYTES = 64;

/**
 * One in-memory partition: append-only arrays indexed by offset (offsets start at 0 and are
 * never deleted), with Kafka's read_committed rules: records of a transaction become visible at
 * its commit marker; aborted ones never; readers stop at the last stable offset (the first offset
 * of a still-open transaction), so they never skip past an open transaction (cases P2).
 *
 * Per offset, `records[o] === null` is a transaction marker (commit or abort), which takes an
 * offset but is never returned, as Kafka's control records; `txns[o]` is the transaction that
 * wrote it (null = non-transactional). Two parallel arrays rather than one entry object per
 * offset: every record stays alive until the bus closes, and each retained object costs the GC.
 *
 * Each array is a list of fixed-size chunks ({@link LOG_CHUNK_ENTRIES} entries; offset `o` is
 * entry `o & mask` of chunk `o >>> bits`), not one growing array: a partition holding millions
 * of records would otherwise reallocate and copy a multi-megabyte array (a large-object-space
 * allocation, which counts towards the next full GC) every time it outgrows its capacity.
 */
export class PartitionLog {
  private readonly recordChunks: (BusRecord | null)[][] = [];
  private readonly txnChunks: (TxnState | null)[][] = [];
  /** Chunk number (offset >>> bits) of recordChunks[0]. */
  private firstChunk = 0;
  /** First offset held in memory; offsets below it are read from `cold`. */
  private base = 0;
  /** Offset the next append gets (entries in the chunks). */
  private end = 0;
  private cold: ColdPartition | null = null;
  private limits: HotWindowLimits = { recordsMax: Infinity, bytesMax: Infinity };
  /** Approximate bytes of the entries in [base, end). */
  private hotBytes = 0;
  /** The cold store failed to flush: keep everything in memory from then on. */
  private coldFailed = false;
  /** Open transaction -> its first offset in this partition. */
  private readonly openFirstOffset = new Map<TxnState, number>();
  /** The open transaction that appended last (in `openFirstOffset`): one Map lookup per transaction, not per record. */
  private lastOpen: TxnState | null = null;

  /** Offset the next append gets. */
  get endOffset(): number {
    return this.end;
  }

  /** Last stable offset: records below it are decided (committed, aborted or non-transactional). */
  get lastStableOffset(): number {
    let lso = this.end;
    for (const first of this.openFirstOffset.values()) if (first < lso) lso = first;
    return lso;
  }

  /** First offset still stored. */
  get startOffset(): number {
    return this.cold === null ? 0 : this.cold.startOffset();
  }

  /** The last stable offset if `txn` were decided: what later writes cannot go below. */
  stableOffsetWithout(txn: TxnState | null): number {
    let lso = this.end;
    for (const [t, first] of this.openFirstOffset) if (t !== txn && first < lso) lso = first;
    return lso;
  }

  /** Appends one entry at offset `end`. */
  private push(record: BusRecord | null, txn: TxnState | null): void {
    const at = this.end & LOG_CHUNK_MASK;
    if (at === 0 || this.recordChunks.length === 0) {
      this.recordChunks.push([]);
      this.txnChunks.push([]);
    }
    this.recordChunks[this.recordChunks.length - 1].push(record);
    this.txnChunks[this.txnChunks.length - 1].push(txn);
    this.end++;
    if (this.cold === null) return;
    if (record !== null) this.hotBytes += entryBytes(record);
    if (this.end - this.base > this.limits.recordsMax || this.hotBytes > this.limits.bytesMax)
      this.evict();
  }

  /**
   * Makes this the partition of a durable store (engine/bus/journal) whose records below
   * `endOffset` are all in `cold`: nothing is held in memory yet, and from now on decided entries
   * are dropped from memory, oldest first, once the window passes `limits` (down to half of
   * them, so the store's flush is paid once per many records).
   */
  attachCold(cold: ColdPartition, endOffset: number, limits: HotWindowLimits): void {
    if (this.end !== 0)
      throw new Error(`attachCold() needs an empty partition log, endOffset=${this.end}`);
    if (!(limits.recordsMax >= 2) || !(limits.bytesMax >= 1)) {
      throw new Error(
        `hot window limits must be recordsMax >= 2 and bytesMax >= 1, recordsMax=${limits.recordsMax} bytesMax=${limits.bytesMax}`,
      );
    }
    this.cold = cold;
    this.limits = limits;
    this.end = this.base = endOffset;
    this.firstChunk = endOffset >>> LOG_CHUNK_BITS;
    const fill = endOffset & LOG_CHUNK_MASK;
    if (fill > 0) {
      this.recordChunks.push(new Array<BusRecord | null>(fill).fill(null));
      this.txnChunks.push(new Array<TxnState | null>(fill).fill(null));
    }
  }

  /** Drops decided entries from the front of the window (see {@link attachCold}). */
  private evict(): void {
    if (this.coldFailed) return;
    const stop = this.lastStableOffset;
    if (stop <= this.base) return;
    try {
      this.cold!.flush();
    } catch {
      // The store reports its failure on its own calls; reads keep working from memory.
      this.coldFailed = true;
      return;
    }
    const recordsTarget = this.limits.recordsMax >>> 1;
    const bytesTarget = this.limits.bytesMax / 2;
    while (
      this.base < stop &&
      (this.end - this.base > recordsTarget || this.hotBytes > bytesTarget)
    ) {
      const chunk = this.recordChunks[0];
      const at = this.base & LOG_CHUNK_MASK;
      const r = chunk[at];
      if (r !== null) this.hotBytes -= entryBytes(r);
      chunk[at] = null;
      this.txnChunks[0][at] = null;
      this.base++;
      if ((this.base & LOG_CHUNK_MASK) === 0) {
        this.recordChunks.shift();
        this.txnChunks.shift();
        this.firstChunk++;
      }
    }
    if (this.base === this.end) this.hotBytes = 0;
  }

  /** Appends a record (txn null = visible at once); returns its offset. */
  append(record: BusRecord, txn: TxnState | null): number {
    const offset = this.end;
    // Registered before the push, which may drop entries below the last stable offset.
    if (txn !== null && txn !== this.lastOpen) {
      if (!this.openFirstOffset.has(txn)) this.openFirstOffset.set(txn, offset);
      this.lastOpen = txn;
    }
    this.push(record, txn);
    return offset;
  }

  /**
   * Writes the commit/abort marker of `txn`, taking an offset. The transaction stays open (its
   * records invisible, the last stable offset held at its first offset) until {@link endTxn}:
   * a commit reserves its markers' offsets before its durable store has it, and decides after.
   */
  appendMarker(txn: TxnState): void {
    this.push(null, txn);
  }

  /** Called once `txn` is decided (status set): its records stop holding the last stable offset. */
  endTxn(txn: TxnState): void {
    this.openFirstOffset.delete(txn);
    if (this.lastOpen === txn) this.lastOpen = null;
  }

  /**
   * Reads visible records from `from` up to the last stable offset, at most `recordsMax`, into
   * `out`. Returns the new position: after the last returned record and after any invisible
   * entries (markers, aborted records) that follow it.
   */
  read(
    topic: string,
    partition: number,
    from: number,
    recordsMax: number,
    out: ConsumedRecord[],
  ): number {
    const lso = this.lastStableOffset;
    let offset = from;
    let taken = 0;
    if (offset < this.base && this.cold !== null) {
      const before = out.length;
      offset = this.cold.read(topic, partition, offset, this.base, recordsMax, out);
      taken = out.length - before;
      if (offset < this.base) return offset;
    }
    const first = this.firstChunk;
    for (; offset < lso; offset++) {
      const c = (offset >>> LOG_CHUNK_BITS) - first;
      const r = this.recordChunks[c][offset & LOG_CHUNK_MASK];
      if (r === null) continue;
      const txn = this.txnChunks[c][offset & LOG_CHUNK_MASK];
      if (txn !== null && txn.status !== 'committed') continue;
      if (taken === recordsMax) break;
      out.push({
        topic,
        partition,
        offset,
        key: r.key,
        value: r.value,
        headers: r.headers,
        timestampMs: r.timestampMs,
      });
      taken++;
    }
    return offset;
  }
}

function entryBytes(r: BusRecord): number {
  return (
    ENTRY_OVERHEAD_BYTES +
    (r.value === null ? 0 : r.value.length) +
    (r.key === null ? 0 : r.key.length)
  );
}
