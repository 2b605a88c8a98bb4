import * as flatbuffers from 'flatbuffers';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  BackoffIdleStrategy,
  BusySpinIdleStrategy,
  ParkingIdleStrategy,
  RING_DEFAULTS,
  RingConsumer,
  RingProducer,
  TRAILER_BYTES,
  createIdleStrategy,
  createRing,
  type IdleStrategyConfig,
  type Parker,
} from '../engine/ring/index.js';
// Internal: only to start positions next to the int32 wrap without writing 2 GiB first.
import { trailerIndexes } from '../engine/ring/layout.js';

interface Received {
  typeId: number;
  offset: number;
  bytes: number[];
}

/**
 * Copies records out: one read call with `limit` if given, else read calls until none is ready.
 */
function drain(consumer: RingConsumer, limit?: number): Received[] {
  const out: Received[] = [];
  const handler = (typeId: number, bytes: Uint8Array, offset: number, length: number): void => {
    out.push({ typeId, offset, bytes: Array.from(bytes.subarray(offset, offset + length)) });
  };
  if (limit !== undefined) consumer.read(handler, limit);
  else while (consumer.read(handler) > 0);
  return out;
}

/** Payload of `length` bytes whose content identifies `tag`. */
function payload(tag: number, length: number): Uint8Array {
  const p = new Uint8Array(length);
  for (let i = 0; i < length; i++) p[i] = (tag * 31 + i * 7 + 1) & 255;
  return p;
}

/** Moves both sides of an empty ring forward by `bytes` (a multiple of 8) with empty records. */
function advance(producer: RingProducer, consumer: RingConsumer, bytes: number): void {
  for (let moved = 0; moved < bytes; moved += 8) {
    producer.write(1, new Uint8Array(0));
    assert.is(
      consumer.read(() => {}),
      1,
    );
  }
}

test('createRing allocates a power-of-two data area plus the trailer', () => {
  assert.is(createRing(64).byteLength, 64 + TRAILER_BYTES);
  assert.is(createRing(1 << 20).byteLength, (1 << 20) + TRAILER_BYTES);
});

test('createRing rejects a capacity that is not a power of two, too small, or not an integer', () => {
  assert.throws(
    () => createRing(1000),
    (e: Error) => e.message === 'ring capacityBytes must be a power of two, capacityBytes=1000',
  );
  assert.throws(() => createRing(32), /must be an integer in \[64, 1073741824\], capacityBytes=32/);
  assert.throws(() => createRing(64.5), /capacityBytes=64.5/);
  assert.throws(() => createRing(2 ** 31), /capacityBytes=2147483648/);
});

test('producer and consumer reject a buffer not made by createRing', () => {
  assert.throws(
    () => new RingProducer(new SharedArrayBuffer(1000)),
    /byteLength=1000 is not a power-of-two data area plus the 256-byte trailer/,
  );
  assert.throws(
    () => new RingConsumer(new ArrayBuffer(64 + TRAILER_BYTES) as unknown as SharedArrayBuffer),
    /must be a SharedArrayBuffer/,
  );
});

test('maxRecordBytes is one eighth of the capacity', () => {
  assert.is(new RingProducer(createRing(256)).maxRecordBytes, 32);
  assert.is(new RingProducer(createRing(1 << 16)).maxRecordBytes, 8192);
});

test('a written record is read back with its type, length and exact bytes', () => {
  const sab = createRing(1024);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  producer.write(7, payload(1, 5));
  producer.write(9, payload(2, 0));
  producer.write(11, payload(3, 100), 10, 20);
  const got = drain(consumer);
  assert.equal(
    got.map((r) => r.typeId),
    [7, 9, 11],
  );
  assert.equal(got[0].bytes, Array.from(payload(1, 5)));
  assert.equal(got[1].bytes, []);
  assert.equal(got[2].bytes, Array.from(payload(3, 100).subarray(10, 30)));
  // Records are 8-aligned: 8 + 5 -> 16, 8 + 0 -> 8, so records start at 0, 16, 24.
  assert.equal(
    got.map((r) => r.offset),
    [8, 24, 32],
  );
  assert.equal(drain(consumer), []);
});

test('handler sees the ring memory itself (zero-copy) at an 8-byte aligned offset', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  const at = producer.claim(3, 4);
  producer.bytes.set([1, 2, 3, 4], at);
  producer.commit(at);
  consumer.read((_typeId, bytes, offset) => {
    assert.is(bytes, consumer.bytes);
    assert.is(bytes.buffer, sab);
    assert.is(offset, at);
    assert.is(offset % 8, 0);
  });
});

test('a FlatBuffers table written across the wrap is read in place from consumer.bytes', () => {
  const builder = new flatbuffers.Builder(64);
  const name = builder.createString('hello ring');
  builder.startObject(2);
  builder.addFieldInt32(0, 42, 0);
  builder.addFieldOffset(1, name, 0);
  builder.finish(builder.endObject());
  const table = builder.asUint8Array();
  assert.is(table.length, 40);
  const sab = createRing(512);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  advance(producer, consumer, 480); // 32 bytes left: the 48-byte record is padded to offset 0
  producer.write(9, table);
  let seen = '';
  consumer.read((_typeId, bytes, offset) => {
    const bb = new flatbuffers.ByteBuffer(bytes);
    const root = offset + bb.readInt32(offset);
    const value = bb.readInt32(root + bb.__offset(root, 4));
    seen = `${value} ${String(bb.__string(root + bb.__offset(root, 6)))} at ${offset}`;
  });
  assert.is(seen, '42 hello ring at 8');
});

test('wrap-around at every start offset and every payload size keeps records contiguous and exact', () => {
  const capacityBytes = 256;
  for (let start = 0; start < capacityBytes; start += 8) {
    for (let length = 0; length <= capacityBytes / 8; length++) {
      const sab = createRing(capacityBytes);
      const producer = new RingProducer(sab, new BusySpinIdleStrategy());
      const consumer = new RingConsumer(sab);
      advance(producer, consumer, start);
      // Three records in a row: at least one straddles the end of the data area for most sizes.
      const sent = [0, 1, 2].map((k) => payload(start * 100 + length * 3 + k, length));
      const offsets = sent.map((p, k) => {
        const at = producer.tryClaim(k + 1, length);
        assert.ok(at >= 0, `start=${start} length=${length} record ${k}: no space`);
        producer.bytes.set(p, at);
        producer.commit(at);
        return at;
      });
      const got = drain(consumer);
      const where = `start=${start} length=${length}`;
      assert.equal(
        got.map((r) => r.typeId),
        [1, 2, 3],
        where,
      );
      got.forEach((r, k) => {
        assert.equal(r.bytes, Array.from(sent[k]), `${where} record ${k} content`);
        assert.is(r.offset, offsets[k], `${where} record ${k} offset`);
        assert.ok(r.offset + length <= capacityBytes, `${where} record ${k} not contiguous`);
      });
      assert.is(
        consumer.read(() => {}),
        0,
        where,
      );
    }
  }
});

test('write places records exactly as tryClaim + commit, at every start offset and payload size, batched or not', () => {
  const capacityBytes = 256;
  for (const batched of [false, true]) {
    for (let start = 0; start < capacityBytes; start += 8) {
      for (let length = 0; length <= capacityBytes / 8; length++) {
        const where = `batched=${batched} start=${start} length=${length}`;
        const viaWrite = createRing(capacityBytes);
        const viaClaim = createRing(capacityBytes);
        const writeReader = new RingConsumer(viaWrite);
        advance(new RingProducer(viaWrite), writeReader, start);
        advance(new RingProducer(viaClaim), new RingConsumer(viaClaim), start);
        // Producers attached after the advance start with an up-to-date head, so write() takes
        // its fast path wherever the record fits before the end, and claim() elsewhere.
        const writer = new RingProducer(viaWrite, new BusySpinIdleStrategy());
        const claimer = new RingProducer(viaClaim, new BusySpinIdleStrategy());
        // Three records in a row: for most sizes one fits, one straddles the end (padding).
        const sent = [0, 1, 2].map((k) => payload(start * 100 + length * 3 + k, length));
        if (batched) writer.beginBatch();
        sent.forEach((p, k) => writer.write(k + 1, p));
        if (batched) writer.endBatch();
        sent.forEach((p, k) => {
          const at = claimer.tryClaim(k + 1, length);
          claimer.bytes.set(p, at);
          claimer.commit(at);
        });
        // Same bytes in the whole buffer (headers, padding, payloads, published tail).
        assert.equal(new Uint8Array(viaWrite), new Uint8Array(viaClaim), where);
        const got = drain(writeReader);
        assert.equal(
          got.map((r) => r.typeId),
          [1, 2, 3],
          where,
        );
        got.forEach((r, k) => assert.equal(r.bytes, Array.from(sent[k]), `${where} record ${k}`));
      }
    }
  }
});

test('write while a claim is outstanding is refused and leaves the claim to commit', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  const at = producer.claim(2, 3);
  producer.bytes.set([7, 8, 9], at);
  assert.throws(
    () => producer.write(1, new Uint8Array(1)),
    (e: Error) =>
      e.message ===
      `claim while the record claimed at offset ${at} is not ` + 'committed; one claim at a time',
  );
  producer.commit(at);
  producer.write(1, new Uint8Array([5]));
  assert.equal(drain(consumer), [
    { typeId: 2, offset: at, bytes: [7, 8, 9] },
    { typeId: 1, offset: at + 16, bytes: [5] },
  ]);
});

test('a record larger than the space left before the end is preceded by padding and starts at 0', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  advance(producer, consumer, 224);
  // 8 + 32 = 40 bytes do not fit in the 32 left: padding covers [224, 256), record at [0, 40).
  const sent = payload(5, 32);
  producer.write(4, sent);
  const got = drain(consumer);
  assert.is(got.length, 1, 'padding is not delivered');
  assert.is(got[0].typeId, 4);
  assert.is(got[0].offset, 8);
  assert.equal(got[0].bytes, Array.from(sent));
});

test('a record larger than maxRecordBytes is refused with a clear error', () => {
  const producer = new RingProducer(createRing(256));
  assert.throws(
    () => producer.write(1, new Uint8Array(33)),
    (e: Error) => e.message === 'record of 33 bytes exceeds ring maxRecordBytes=32 (capacity 256)',
  );
  assert.throws(
    () => producer.tryClaim(1, 1000),
    (e: Error) =>
      e.message === 'record of 1000 bytes exceeds ring maxRecordBytes=32 (capacity 256)',
  );
  assert.throws(() => producer.claim(1, -1), /record length must be an integer >= 0, length=-1/);
  assert.throws(() => producer.claim(1, 2.5), /length=2.5/);
});

test('typeId must be an integer > 0', () => {
  const producer = new RingProducer(createRing(256));
  assert.throws(
    () => producer.tryClaim(0, 1),
    (e: Error) => e.message === 'typeId must be an integer > 0, typeId=0',
  );
  assert.throws(() => producer.write(-1, new Uint8Array(1)), /typeId=-1/);
  assert.throws(() => producer.claim(1.5, 1), /typeId=1.5/);
  assert.throws(() => producer.claim(2 ** 31, 1), /typeId=2147483648/);
});

test('write rejects a source range outside src', () => {
  const producer = new RingProducer(createRing(256));
  assert.throws(
    () => producer.write(1, new Uint8Array(4), 2, 3),
    /write range \[2, 5\) is outside src of 4 bytes/,
  );
  assert.throws(() => producer.write(1, new Uint8Array(4), -1, 1), /write range/);
});

test('tryClaim returns -1 when the ring is full and succeeds once the consumer has read', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  // 32-byte payloads take 8 + 32 = 40 bytes: six fit (240), leaving 16.
  let written = 0;
  for (let at = producer.tryClaim(1, 32); at >= 0; at = producer.tryClaim(1, 32)) {
    producer.commit(at);
    written++;
  }
  assert.is(written, 6);
  assert.is(producer.tryClaim(1, 9), -1, '8 + 9 -> 24 bytes do not fit in 16');
  const last = producer.tryClaim(1, 8);
  assert.is(last, 248, 'a 16-byte record fills the ring exactly');
  producer.commit(last);
  assert.is(producer.tryClaim(1, 0), -1, 'full');
  assert.is(
    consumer.read(() => {}, 1),
    1,
  );
  const at = producer.tryClaim(2, 32);
  assert.is(at, 8, 'the 40 bytes freed by one read are reused from the start');
  producer.commit(at);
  assert.is(drain(consumer).length, 7);
});

test('a wrapping record waits for room for its padding too', () => {
  const sab = createRing(512);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  for (let i = 0; i < 7; i++) producer.write(1, new Uint8Array(56)); // 7 * 64: tail 448
  assert.is(
    consumer.read(() => {}, 1),
    1,
  ); // head 64: 128 free, 64 of them before the end
  // 8 + 57 -> 72 bytes fit in the 128 free, but not before the end: 64 padding + 72 = 136.
  assert.is(producer.tryClaim(1, 57), -1);
  assert.is(
    consumer.read(() => {}, 1),
    1,
  ); // 192 free
  const at = producer.tryClaim(1, 57);
  assert.is(at, 8, 'padding fills [448, 512), the record starts at 0');
  producer.commit(at);
  const got = drain(consumer);
  assert.is(got.length, 6, 'five left + the wrapped one; padding is skipped');
  assert.is(got[5]!.offset, 8);
});

test('claim and commit are one at a time and commit checks the offset', () => {
  const producer = new RingProducer(createRing(256));
  assert.throws(() => producer.commit(8), /commit\(offset=8\) without an outstanding claim/);
  const at = producer.claim(1, 4);
  assert.throws(
    () => producer.claim(1, 4),
    (e: Error) =>
      e.message ===
      `claim while the record claimed at offset ${at} is not ` + 'committed; one claim at a time',
  );
  assert.throws(
    () => producer.commit(at + 8),
    new RegExp(`commit\\(offset=${at + 8}\\) does not match the claimed offset ${at}`),
  );
  producer.commit(at);
});

test('an uncommitted claim is invisible to the consumer until commit', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  const at = producer.claim(1, 8);
  assert.is(consumer.hasData(), false);
  assert.is(
    consumer.read(() => {}),
    0,
  );
  producer.commit(at);
  assert.is(consumer.hasData(), true);
  assert.is(
    consumer.read(() => {}),
    1,
  );
});

test('read delivers at most limit records per call, in order', () => {
  const sab = createRing(1024);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  for (let i = 1; i <= 10; i++) producer.write(i, payload(i, i));
  const batches = [3, 3, 3, 3, 3].map(() => drain(consumer, 3).map((r) => r.typeId));
  assert.equal(batches, [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10], []]);
  assert.throws(() => consumer.read(() => {}, 0), /read limit must be >= 1, limit=0/);
});

test('the head is published once per read call, after the batch', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  for (let at = producer.tryClaim(1, 32); at >= 0; at = producer.tryClaim(1, 32))
    producer.commit(at);
  let freeDuringBatch = -1;
  consumer.read(() => {
    if (freeDuringBatch === -1) freeDuringBatch = producer.tryClaim(1, 32);
  }, 2);
  assert.is(freeDuringBatch, -1, 'space is not handed back in the middle of a batch');
  assert.ok(producer.tryClaim(1, 32) >= 0, 'space is handed back when read returns');
});

test('inside a batch, records are published every publishBatchRecordsMax commits and at endBatch', () => {
  const sab = createRing(1 << 16);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  const every = RING_DEFAULTS.publishBatchRecordsMax;
  producer.beginBatch();
  for (let i = 1; i < every; i++) producer.write(i, payload(i, 4));
  assert.is(consumer.hasData(), false, `${every - 1} staged records are not visible yet`);
  producer.write(every, payload(every, 4));
  assert.equal(
    drain(consumer).map((r) => r.typeId),
    Array.from({ length: every }, (_, k) => k + 1),
  );
  producer.write(500, payload(500, 4));
  assert.is(consumer.hasData(), false);
  producer.endBatch();
  assert.equal(
    drain(consumer).map((r) => r.typeId),
    [500],
  );
  producer.write(501, payload(501, 4));
  assert.equal(
    drain(consumer).map((r) => r.typeId),
    [501],
    'after endBatch, commit publishes',
  );
});

test('a batch publishes its staged records before tryClaim reports a full ring', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  producer.beginBatch();
  let written = 0;
  for (let at = producer.tryClaim(1, 32); at >= 0; at = producer.tryClaim(1, 32)) {
    producer.commit(at);
    written++;
  }
  assert.is(written, 6);
  assert.is(drain(consumer).length, 6, 'staged records were published when the ring was full');
  producer.endBatch();
});

test('batch misuse is refused; close publishes an open batch', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  assert.throws(() => producer.endBatch(), /endBatch\(\) without beginBatch\(\)/);
  producer.beginBatch();
  assert.throws(() => producer.beginBatch(), /beginBatch\(\) while a batch is open/);
  const at = producer.claim(1, 1);
  assert.throws(
    () => producer.endBatch(),
    new RegExp(`endBatch\\(\\) while the record claimed at offset ${at} is not committed`),
  );
  producer.commit(at);
  producer.write(2, payload(2, 3));
  assert.is(consumer.hasData(), false);
  producer.close();
  assert.equal(
    drain(consumer).map((r) => r.typeId),
    [1, 2],
  );
  assert.is(consumer.isClosed(), true);
});

test('a handler that throws consumes the records up to and including its own', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  for (let i = 1; i <= 4; i++) producer.write(i, payload(i, 4));
  assert.throws(
    () =>
      consumer.read((typeId) => {
        if (typeId === 2) throw new Error('boom');
      }),
    /boom/,
  );
  assert.equal(
    drain(consumer).map((r) => r.typeId),
    [3, 4],
  );
});

test('positions wrap past 2^31 without losing or reordering records', () => {
  const capacityBytes = 256;
  const sab = createRing(capacityBytes);
  const trailer = trailerIndexes(capacityBytes);
  const i32 = new Int32Array(sab);
  const start = 2 ** 31 - 3 * capacityBytes; // as int32: 0x7ffffd00
  i32[trailer.tailPosition] = start;
  i32[trailer.headPosition] = start;
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  const typeIds: number[] = [];
  for (let i = 1; i <= 200; i++) {
    producer.write(i, payload(i, i % 33));
    for (const r of drain(consumer)) {
      assert.equal(r.bytes, Array.from(payload(r.typeId, r.typeId % 33)));
      typeIds.push(r.typeId);
    }
  }
  assert.equal(
    typeIds,
    Array.from({ length: 200 }, (_, k) => k + 1),
  );
  assert.ok(Atomics.load(i32, trailer.headPosition) < 0, 'head wrapped to negative int32');
});

test('close: records written before close are still delivered, then isClosed is true', () => {
  const sab = createRing(256);
  const producer = new RingProducer(sab);
  const consumer = new RingConsumer(sab);
  producer.write(1, payload(1, 3));
  producer.write(2, payload(2, 3));
  producer.close();
  producer.close(); // idempotent
  assert.is(consumer.isClosed(), false, 'not drained yet');
  assert.is(consumer.waitForData(1000), true);
  assert.is(drain(consumer, 1).length, 1);
  assert.is(consumer.isClosed(), false);
  assert.is(drain(consumer).length, 1);
  assert.is(consumer.isClosed(), true);
  const startMs = performance.now();
  assert.is(consumer.waitForData(5000), false);
  assert.ok(
    performance.now() - startMs < 50,
    'waitForData on a closed, drained ring returns at once',
  );
});

test('close: claims after close and close with an uncommitted claim are refused', () => {
  const producer = new RingProducer(createRing(256));
  const at = producer.claim(1, 1);
  assert.throws(
    () => producer.close(),
    new RegExp(`close\\(\\) while the record claimed at offset ${at} is not committed`),
  );
  producer.commit(at);
  producer.close();
  assert.throws(() => producer.claim(1, 1), /claim on a closed ring/);
  assert.throws(() => producer.write(1, new Uint8Array(1)), /claim on a closed ring/);
});

test('waitForData returns false after about timeoutMs when nothing is written', () => {
  for (const config of [
    { kind: 'backoff' },
    { kind: 'park', parkMs: 1000 },
  ] as IdleStrategyConfig[]) {
    const consumer = new RingConsumer(createRing(256), createIdleStrategy(config));
    const startMs = performance.now();
    assert.is(consumer.waitForData(30), false);
    const elapsedMs = performance.now() - startMs;
    assert.ok(elapsedMs >= 29 && elapsedMs < 200, `${config.kind}: ${elapsedMs} ms`);
    assert.is(consumer.waitForData(0), false);
    assert.throws(() => consumer.waitForData(-1), /timeoutMs must be >= 0, timeoutMs=-1/);
  }
});

test('backoff idle strategy spins spinsMax times, then parks with doubling timeouts', () => {
  const parks: number[] = [];
  const parker: Parker = { park: (ms) => parks.push(ms) };
  const idle = new BackoffIdleStrategy({ spinsMax: 2, parkMsMin: 1, parkMsMax: 4 });
  for (let i = 0; i < 6; i++) idle.idle(0, parker);
  assert.equal(parks, [1, 2, 4, 4]);
  idle.idle(1, parker); // work resets
  idle.idle(0, parker);
  idle.idle(0, parker);
  idle.idle(0, parker);
  assert.equal(parks, [1, 2, 4, 4, 1]);
});

test('parking idle strategy parks on every idle call and not after work', () => {
  const parks: number[] = [];
  const idle = new ParkingIdleStrategy(7);
  idle.idle(0, { park: (ms) => parks.push(ms) });
  idle.idle(3, { park: (ms) => parks.push(ms) });
  assert.equal(parks, [7]);
});

test('createIdleStrategy builds each kind and rejects bad configuration', () => {
  assert.is(createIdleStrategy({ kind: 'busy-spin' }).constructor.name, 'BusySpinIdleStrategy');
  assert.is(createIdleStrategy({ kind: 'no-op' }).constructor.name, 'NoOpIdleStrategy');
  assert.is(createIdleStrategy({ kind: 'park' }).constructor.name, 'ParkingIdleStrategy');
  assert.is(createIdleStrategy({ kind: 'backoff' }).constructor.name, 'BackoffIdleStrategy');
  assert.throws(
    () => createIdleStrategy({ kind: 'sleep' } as unknown as IdleStrategyConfig),
    /kind must be one of busy-spin, no-op, park, backoff, kind=sleep/,
  );
  assert.throws(
    () => createIdleStrategy({ kind: 'park', parkMs: 0 }),
    /parkMs must be a finite number > 0, parkMs=0/,
  );
  assert.throws(
    () => new BackoffIdleStrategy({ spinsMax: -1 }),
    /spinsMax must be an integer >= 0/,
  );
  assert.throws(
    () => new BackoffIdleStrategy({ parkMsMin: 5, parkMsMax: 1 }),
    /parkMsMax must be >= parkMsMin, parkMsMin=5 parkMsMax=1/,
  );
});

test.run();
