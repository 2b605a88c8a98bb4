import { ByteBuffer } from 'flatbuffers';

/**
 * Reuses one flatbuffers ByteBuffer per backing ArrayBuffer. A ByteBuffer is bound to one
 * Uint8Array and allocates a TextDecoder when created, so making one per record would dominate
 * decoding; instead it spans the whole backing buffer and readers add `bytes.byteOffset`.
 * Keeps the last backing buffer alive until another one is seen.
 */
export class ByteBufferCache {
  private bb = new ByteBuffer(new Uint8Array(0));
  private buffer: ArrayBufferLike | null = null;

  /** A ByteBuffer over all of `bytes.buffer`: `bytes[i]` is at position `bytes.byteOffset + i`. */
  over(bytes: Uint8Array): ByteBuffer {
    if (bytes.buffer !== this.buffer) {
      this.bb = new ByteBuffer(new Uint8Array(bytes.buffer));
      this.buffer = bytes.buffer;
    }
    return this.bb;
  }
}
