/**
 * Every bound of engine/ring with its default, in one place.
 */
export const RING_DEFAULTS = {
  /**
   * Records one RingConsumer.read() call delivers when no limit is given. The ring bounds a
   * batch anyway (see readBytesMaxDivisor); this only caps handler work per call.
   */
  readLimit: 1 << 16,
  /**
   * A read() call stops after consuming capacityBytes / readBytesMaxDivisor bytes, so a long
   * batch hands space back to a waiting producer at least this many times per lap.
   */
  readBytesMaxDivisor: 4,
  /**
   * Inside RingProducer.beginBatch()/endBatch(), the tail is published once per this many
   * commits: fewer Atomics and fewer transfers of the tail's cache line, while the consumer can
   * start on a long batch before it ends.
   */
  publishBatchRecordsMax: 64,
  /** BackoffIdleStrategy: idle calls that only spin before the first park. */
  spinsMax: 200,
  /** BackoffIdleStrategy: first park timeout, ms; doubles per idle call up to parkMsMax. */
  parkMsMin: 0.05,
  /**
   * Longest single park, ms (BackoffIdleStrategy and ParkingIdleStrategy). A parked side is woken
   * by the other side's notify; the timeout is only a safety net, so it can be long.
   */
  parkMsMax: 20,
} as const;
