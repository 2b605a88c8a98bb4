/**
 * engine/ring: single-producer single-consumer record ring over a SharedArrayBuffer, after
 * Agrona's OneToOneRingBuffer, and the idle strategies its two sides wait with. Layout and
 * protocol: layout.ts.
 */
export { createRing } from './create-ring.js';
export { RingProducer } from './producer.js';
export { RingConsumer, type RecordHandler } from './consumer.js';
export {
  BackoffIdleStrategy,
  BusySpinIdleStrategy,
  NoOpIdleStrategy,
  ParkingIdleStrategy,
  createIdleStrategy,
  type BackoffOptions,
  type IdleStrategy,
  type IdleStrategyConfig,
  type Parker,
} from './idle.js';
export { RING_DEFAULTS } from './defaults.js';
export {
  CAPACITY_BYTES_MAX,
  CAPACITY_BYTES_MIN,
  PADDING_TYPE_ID,
  RECORD_ALIGNMENT_BYTES,
  RECORD_HEADER_BYTES,
  TRAILER_BYTES,
  maxRecordBytesFor,
} from './layout.js';
