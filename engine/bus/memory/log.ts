import type { BusRecord, ConsumedRecord } from '../types.js'

/** log2 of {@link LOG_CHUNK_ENTRIES}. */
const LOG_CHUNK_BITS = 12
/** Entries per chunk of a {@link PartitionLog}'s arrays. */
export const LOG_CHUNK_ENTRIES = 1 << LOG_CHUNK_BITS
const LOG_CHUNK_MASK = LOG_CHUNK_ENTRIES - 1

/** The state of one transaction, shared by every partition it wrote to. */
export interface TxnState {
  status: 'open' | 'committed' | 'aborted'
}

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
  private readonly recordChunks: (BusRecord | null)[][] = []
  private readonly txnChunks: (TxnState | null)[][] = []
  /** Offset the next append gets (entries in the chunks). */
  private end = 0
  /** Open transaction -> its first offset in this partition. */
  private readonly openFirstOffset = new Map<TxnState, number>()
  /** The open transaction that appended last (in `openFirstOffset`): one Map lookup per transaction, not per record. */
  private lastOpen: TxnState | null = null

  /** Offset the next append gets. */
  get endOffset(): number {
    return this.end
  }

  /** Last stable offset: records below it are decided (committed, aborted or non-transactional). */
  get lastStableOffset(): number {
    let lso = this.end
    for (const first of this.openFirstOffset.values()) if (first < lso) lso = first
    return lso
  }

  /** Appends one entry at offset `end`. */
  private push(record: BusRecord | null, txn: TxnState | null): void {
    const at = this.end & LOG_CHUNK_MASK
    if (at === 0) {
      this.recordChunks.push([])
      this.txnChunks.push([])
    }
    this.recordChunks[this.recordChunks.length - 1].push(record)
    this.txnChunks[this.txnChunks.length - 1].push(txn)
    this.end++
  }

  /**
   * Rebuilds a partition from durable state (engine/bus/journal): each record at its offset, the
   * gaps (markers, aborted or torn transactions) as invisible entries up to `endOffset`.
   */
  restore(records: readonly { offset: number; record: BusRecord }[], endOffset: number): void {
    if (this.end !== 0) throw new Error(`restore() needs an empty partition log, endOffset=${this.end}`)
    for (let i = 0; i < endOffset; i++) this.push(null, null)
    for (const r of records) {
      if (!(r.offset >= 0 && r.offset < endOffset)) throw new Error(`restored offset must be in [0, ${endOffset}), offset=${r.offset}`)
      this.recordChunks[r.offset >>> LOG_CHUNK_BITS][r.offset & LOG_CHUNK_MASK] = r.record
    }
  }

  /** Appends a record (txn null = visible at once); returns its offset. */
  append(record: BusRecord, txn: TxnState | null): number {
    const offset = this.end
    this.push(record, txn)
    if (txn !== null && txn !== this.lastOpen) {
      if (!this.openFirstOffset.has(txn)) this.openFirstOffset.set(txn, offset)
      this.lastOpen = txn
    }
    return offset
  }

  /**
   * Writes the commit/abort marker of `txn`, taking an offset. The transaction stays open (its
   * records invisible, the last stable offset held at its first offset) until {@link endTxn}:
   * a commit reserves its markers' offsets before its durable store has it, and decides after.
   */
  appendMarker(txn: TxnState): void {
    this.push(null, txn)
  }

  /** Called once `txn` is decided (status set): its records stop holding the last stable offset. */
  endTxn(txn: TxnState): void {
    this.openFirstOffset.delete(txn)
    if (this.lastOpen === txn) this.lastOpen = null
  }

  /**
   * Reads visible records from `from` up to the last stable offset, at most `recordsMax`, into
   * `out`. Returns the new position: after the last returned record and after any invisible
   * entries (markers, aborted records) that follow it.
   */
  read(topic: string, partition: number, from: number, recordsMax: number, out: ConsumedRecord[]): number {
    const lso = this.lastStableOffset
    let offset = from
    let taken = 0
    for (; offset < lso; offset++) {
      const r = this.recordChunks[offset >>> LOG_CHUNK_BITS][offset & LOG_CHUNK_MASK]
      if (r === null) continue
      const txn = this.txnChunks[offset >>> LOG_CHUNK_BITS][offset & LOG_CHUNK_MASK]
      if (txn !== null && txn.status !== 'committed') continue
      if (taken === recordsMax) break
      out.push({ topic, partition, offset, key: r.key, value: r.value, headers: r.headers, timestampMs: r.timestampMs })
      taken++
    }
    return offset
  }
}
