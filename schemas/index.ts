/**
 * Public face of schemas/: the flatc-generated FlatBuffers classes for schemas/sluice.fbs.
 *
 * Most code should use engine/codec (EnvelopeWriter, EnvelopeView, encodeChange/decodeChange)
 * rather than these low-level classes. Regenerate with `npm run schemas`.
 */
export { Cause } from './generated/sluice/cause.js';
export { Change } from './generated/sluice/change.js';
export { Envelope } from './generated/sluice/envelope.js';
export { Op } from './generated/sluice/op.js';
