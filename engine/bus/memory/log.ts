import type { BusRecord, ConsumedRecord } from '../types.js'

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
 */
export class PartitionLog {
  private readonly records: (BusRecord | null)[] = []
  private readonly txns: (TxnState | null)[] = []
  /** Open transaction -> its first offset in this partition. */
  private readonly openFirstOffset = new Map<TxnState, number>()

  /** Offset the next append gets. */
  get endOffset(): number {
    return this.records.length
  }

  /** Last stable offset: records below it are decided (committed, aborted or non-transactional). */
  get lastStableOffset(): number {
    let lso = this.records.length
    for (const first of this.openFirstOffset.values()) if (first < lso) lso = first
    return lso
  }

  /**
   * Rebuilds a partition from durable state (engine/bus/journal): each record at its offset, the
   * gaps (markers, aborted or torn transactions) as invisible entries up to `endOffset`.
   */
  restore(records: readonly { offset: number; record: BusRecord }[], endOffset: number): void {
    if (this.records.length !== 0) throw new Error(`restore() needs an empty partition log, endOffset=${this.records.length}`)
    for (let i = 0; i < endOffset; i++) {
      this.records.push(null)
      this.txns.push(null)
    }
    for (const r of records) {
      if (!(r.offset >= 0 && r.offset < endOffset)) throw new Error(`restored offset must be in [0, ${endOffset}), offset=${r.offset}`)
      this.records[r.offset] = r.record
    }
  }

  /** Appends a record (txn null = visible at once); returns its offset. */
  append(record: BusRecord, txn: TxnState | null): number {
    const offset = this.records.length
    this.records.push(record)
    this.txns.push(txn)
    if (txn !== null && !this.openFirstOffset.has(txn)) this.openFirstOffset.set(txn, offset)
    return offset
  }

  /**
   * Writes the commit/abort marker of `txn`, taking an offset. The transaction stays open (its
   * records invisible, the last stable offset held at its first offset) until {@link endTxn}:
   * a commit reserves its markers' offsets before its durable store has it, and decides after.
   */
  appendMarker(txn: TxnState): void {
    this.records.push(null)
    this.txns.push(txn)
  }

  /** Called once `txn` is decided (status set): its records stop holding the last stable offset. */
  endTxn(txn: TxnState): void {
    this.openFirstOffset.delete(txn)
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
      const r = this.records[offset]
      if (r === null) continue
      const txn = this.txns[offset]
      if (txn !== null && txn.status !== 'committed') continue
      if (taken === recordsMax) break
      out.push({ topic, partition, offset, key: r.key, value: r.value, headers: r.headers, timestampMs: r.timestampMs })
      taken++
    }
    return offset
  }
}
