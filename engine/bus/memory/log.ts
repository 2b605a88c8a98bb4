import type { BusRecord, ConsumedRecord } from '../types.js'

/** The state of one transaction, shared by every partition it wrote to. */
export interface TxnState {
  status: 'open' | 'committed' | 'aborted'
}

/**
 * One entry per offset. `record === null` is a transaction marker (commit or abort), which
 * takes an offset but is never returned, as Kafka's control records.
 */
interface Entry {
  record: BusRecord | null
  txn: TxnState | null
}

/**
 * One in-memory partition: an append-only array indexed by offset (offsets start at 0 and are
 * never deleted), with Kafka's read_committed rules: records of a transaction become visible at
 * its commit marker; aborted ones never; readers stop at the last stable offset (the first offset
 * of a still-open transaction), so they never skip past an open transaction (cases P2).
 */
export class PartitionLog {
  private readonly entries: Entry[] = []
  /** Open transaction -> its first offset in this partition. */
  private readonly openFirstOffset = new Map<TxnState, number>()

  /** Offset the next append gets. */
  get endOffset(): number {
    return this.entries.length
  }

  /** Last stable offset: records below it are decided (committed, aborted or non-transactional). */
  get lastStableOffset(): number {
    let lso = this.entries.length
    for (const first of this.openFirstOffset.values()) if (first < lso) lso = first
    return lso
  }

  /**
   * Rebuilds a partition from durable state (engine/bus/journal): each record at its offset, the
   * gaps (markers, aborted or torn transactions) as invisible entries up to `endOffset`.
   */
  restore(records: readonly { offset: number; record: BusRecord }[], endOffset: number): void {
    if (this.entries.length !== 0) throw new Error(`restore() needs an empty partition log, endOffset=${this.entries.length}`)
    for (let i = 0; i < endOffset; i++) this.entries.push({ record: null, txn: null })
    for (const r of records) {
      if (!(r.offset >= 0 && r.offset < endOffset)) throw new Error(`restored offset must be in [0, ${endOffset}), offset=${r.offset}`)
      this.entries[r.offset] = { record: r.record, txn: null }
    }
  }

  /** Appends a record (txn null = visible at once); returns its offset. */
  append(record: BusRecord, txn: TxnState | null): number {
    const offset = this.entries.length
    this.entries.push({ record, txn })
    if (txn !== null && !this.openFirstOffset.has(txn)) this.openFirstOffset.set(txn, offset)
    return offset
  }

  /** Writes the commit/abort marker of `txn` (its status must already be decided). */
  appendMarker(txn: TxnState): void {
    this.entries.push({ record: null, txn })
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
      const e = this.entries[offset]
      if (e.record === null || (e.txn !== null && e.txn.status !== 'committed')) continue
      if (taken === recordsMax) break
      const r = e.record
      out.push({ topic, partition, offset, key: r.key, value: r.value, headers: r.headers, timestampMs: r.timestampMs })
      taken++
    }
    return offset
  }
}
