/**
 * The event frame a queue reader writes into a ring for a service: the journal record's bytes
 * (an Envelope) prefixed by its queue index, so the service knows which input it is handling
 * without decoding anything twice.
 *
 * ```
 *  ring record payload (starts 8-byte aligned, after the ring's own [length][typeId] header)
 *   0                   8                                   8 + envelopeBytes
 *   +-------------------+-----------------------------------+
 *   | index : float64   | Envelope (FlatBuffers), in place  |
 *   +-------------------+-----------------------------------+
 * ```
 * The index is a float64 so queue indexes up to 2^53 stay exact without BigInt.
 */
export const FRAME_TYPE_EVENT = 1;
/**
 * A record too large for the ring (over its maxRecordBytes, capacityBytes / 8) is handed over by
 * reference: the frame is the 8-byte index alone, and the service reads the envelope from the
 * queue partition's journal itself.
 */
export const FRAME_TYPE_EVENT_REF = 2;
/** Bytes before the envelope. */
export const FRAME_HEADER_BYTES = 8;

/**
 * Reads and writes frame headers over one buffer (a ring's data area). DataView accesses are
 * optimized by V8 and need no alignment; little-endian like FlatBuffers.
 */
export class FrameCodec {
  private readonly view: DataView;
  constructor(bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  /** Writes the queue index of the frame whose payload starts at `offset`. */
  writeIndex(offset: number, index: number): void {
    this.view.setFloat64(offset, index, true);
  }
  /** Reads the queue index of the frame whose payload starts at `offset`. */
  readIndex(offset: number): number {
    return this.view.getFloat64(offset, true);
  }
}
