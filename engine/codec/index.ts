/**
 * engine/codec: the Sluice wire format over the flatc-generated code in schemas/.
 *
 * - `EnvelopeWriter` / `EnvelopeView`: one event (type, key, event time, cause, payload);
 * - `encodeChange` / `decodeChange`: the CDC payload (EVENT_TYPE_CHANGE);
 * - `ChangeRecordWriter`: envelope + Change in one pass, each string encoded once (capture pumps);
 * - `encodeJson` / `decodeJson`: the JSON payload (EVENT_TYPE_JSON);
 * - `queueId`: the 32-bit id of a queue name stored in an envelope's cause.
 */
export {
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  USER_EVENT_TYPE_MIN,
  ENVELOPE_WRITER_DEFAULTS,
  EnvelopeWriter,
  EnvelopeView,
  decodeEnvelope,
} from './envelope.js';
export type { EnvelopeInit, EnvelopeFields, EnvelopeWriterOptions } from './envelope.js';
export { encodeChange, decodeChange } from './change.js';
export type { Change, ChangeOp } from './change.js';
export { ChangeRecordWriter } from './change-record.js';
export { encodeJson, decodeJson } from './json.js';
export { queueId } from './queue-id.js';
export { firstInvalidUtf8 } from './utf8.js';
