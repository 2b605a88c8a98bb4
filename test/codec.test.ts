import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { Builder, ByteBuffer } from 'flatbuffers';
import { Envelope } from '../schemas/index.js';
import {
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  USER_EVENT_TYPE_MIN,
  ChangeRecordWriter,
  EnvelopeView,
  EnvelopeWriter,
  decodeChange,
  decodeEnvelope,
  decodeJson,
  encodeChange,
  encodeJson,
  queueId,
} from '../engine/codec/index.js';
import type { Change } from '../engine/codec/index.js';

const UNICODE = 'Grüße 😀';
const ESCAPES = 'q"uote\\back\nline\ttab';
const TWO_MB = 'x'.repeat(2 * 1024 * 1024 - 3) + 'ü€';

test('event type ids are the documented constants', () => {
  assert.is(EVENT_TYPE_CHANGE, 1);
  assert.is(EVENT_TYPE_JSON, 2);
  assert.is(USER_EVENT_TYPE_MIN, 100);
});

test('queueId is FNV-1a 32 over UTF-8, unsigned', () => {
  // Reference values from the FNV test suite (isthe.com/chongo/tech/comp/fnv).
  assert.is(queueId(''), 0x811c9dc5);
  assert.is(queueId('a'), 0xe40c292c);
  assert.is(queueId('foobar'), 0xbf9cf968);
  // Non-ASCII hashes the UTF-8 bytes: 'ü' = c3 bc.
  let h = 0x811c9dc5;
  for (const byte of [0xc3, 0xbc]) h = Math.imul(h ^ byte, 0x01000193);
  assert.is(queueId('ü'), h >>> 0);
  assert.ok(queueId('history-changes') >= 0);
});

test('an envelope round-trips every field through encode and EnvelopeView', () => {
  const writer = new EnvelopeWriter();
  const payload = new Uint8Array(64).map((_, i) => i * 3);
  const bytes = writer.encode({
    type: USER_EVENT_TYPE_MIN + 7,
    key: UNICODE,
    eventTimeMs: 1_700_000_000_123.5,
    causeQueue: 0xfffffffe,
    causePartition: 0x80000001,
    causeIndex: Number.MAX_SAFE_INTEGER,
    payload,
  });
  const view = new EnvelopeView().wrap(bytes, 0, bytes.length);
  assert.is(view.type, 107);
  assert.is(view.key, UNICODE);
  assert.is(view.eventTimeMs, 1_700_000_000_123.5);
  assert.ok(view.hasCause);
  assert.is(view.causeQueue, 0xfffffffe);
  assert.is(view.causePartition, 0x80000001);
  assert.is(view.causeIndex, Number.MAX_SAFE_INTEGER);
  assert.equal([...view.payload], [...payload]);
  assert.is(view.payloadLength, 64);
});

test('an envelope with only a type reads back defaults: null key, time 0, no cause, empty payload', () => {
  const bytes = new EnvelopeWriter().encode({ type: EVENT_TYPE_JSON });
  const fields = decodeEnvelope(bytes);
  assert.equal(fields, {
    type: 2,
    key: null,
    eventTimeMs: 0,
    causeQueue: 0,
    causePartition: 0,
    causeIndex: -1,
    payload: new Uint8Array(0),
  });
});

test('keys round-trip exactly: escapes, empty, leading U+FEFF, cached and uncached', () => {
  const writer = new EnvelopeWriter({ keyCacheEntriesMax: 2, keyCacheLengthMax: 8 });
  const view = new EnvelopeView();
  const keys = [
    ESCAPES,
    '',
    '\ufeffbom',
    UNICODE,
    'k1',
    'k2',
    'k1',
    'k3',
    'a'.repeat(100),
    ESCAPES,
  ];
  for (const key of keys) {
    const bytes = writer.encode({ type: 3, key });
    assert.is(view.wrap(bytes, 0, bytes.length).key, key);
  }
});

test('encodeInto writes in place at a non-zero offset of a SharedArrayBuffer and the view reads it there', () => {
  const writer = new EnvelopeWriter();
  const sab = new SharedArrayBuffer(4096);
  const ring = new Uint8Array(sab, 256, 1024); // a view that itself starts inside the buffer
  ring.fill(0xee);
  const payload = encodeJson({ account: 42, delta: -250, note: UNICODE });
  const size = writer.build({
    type: EVENT_TYPE_JSON,
    key: 'acct-42',
    eventTimeMs: 5,
    causeIndex: 9,
    payload,
  });
  const written = writer.copyTo(ring, 100);
  assert.is(written, size);
  assert.is(ring[99], 0xee, 'byte before the slot untouched');
  assert.is(ring[100 + size], 0xee, 'byte after the slot untouched');

  const view = new EnvelopeView().wrap(ring, 100, size);
  assert.is(view.key, 'acct-42');
  assert.is(view.causeIndex, 9);
  assert.is(view.causeQueue, 0);
  assert.equal(decodeJson(view.payload), { account: 42, delta: -250, note: UNICODE });
  // Zero-copy: the payload is a view of the same SharedArrayBuffer, at payloadOffset in `ring`.
  assert.ok(view.payload.buffer === sab);
  assert.is(view.payload.byteOffset, ring.byteOffset + view.payloadOffset);
  assert.equal(decodeJson(ring, view.payloadOffset, view.payloadLength), decodeJson(view.payload));

  // The same view is reused over another record of another buffer.
  const other = new Uint8Array(300);
  const n = writer.encodeInto({ type: 100, key: 'b' }, other, 17);
  assert.is(view.wrap(other, 17, n).key, 'b');
  assert.is(view.hasCause, false);
  assert.is(view.causeIndex, -1);
});

test('a 2 MB JSON payload round-trips through encode and decodeJson', () => {
  const writer = new EnvelopeWriter({ initialBytes: 64 });
  const bytes = writer.encode({ type: EVENT_TYPE_JSON, payload: encodeJson({ text: TWO_MB }) });
  const view = new EnvelopeView().wrap(bytes, 0, bytes.length);
  assert.equal(decodeJson(view.payload), { text: TWO_MB });
  // The writer keeps working (and stays correct) after growing.
  const small = writer.encode({ type: 100, key: 'small' });
  assert.is(view.wrap(small, 0, small.length).key, 'small');
  assert.ok(small.length < 64);
});

test('encodeInto throws RangeError when the envelope does not fit, leaving the target unchanged', () => {
  const writer = new EnvelopeWriter();
  const target = new Uint8Array(40).fill(7);
  assert.throws(
    () => writer.encodeInto({ type: 100, payload: new Uint8Array(64) }, target, 0),
    (e: unknown) =>
      e instanceof RangeError && /offset=0 length=\d+ bytes.length=40/.test(e.message),
  );
  assert.ok(target.every((b) => b === 7));
});

test('the writer rejects out-of-range fields with the invariant and the value', () => {
  const writer = new EnvelopeWriter();
  const throwsWith = (fn: () => unknown, message: string) =>
    assert.throws(fn, (e: unknown) => e instanceof Error && e.message === message);
  throwsWith(
    () => writer.encode({ type: 0 }),
    'envelope type must be an integer in 1 .. 2^32-1, type=0',
  );
  throwsWith(
    () => writer.encode({ type: 2 ** 32 }),
    'envelope type must be an integer in 1 .. 2^32-1, type=4294967296',
  );
  throwsWith(
    () => writer.encode({ type: 1, causeIndex: 1.5 }),
    'causeIndex must be an integer in 0 .. 2^53-1, causeIndex=1.5',
  );
  throwsWith(
    () => writer.encode({ type: 1, causeIndex: 0, causeQueue: -1 }),
    'causeQueue must be a uint32, causeQueue=-1',
  );
  throwsWith(
    () => writer.encode({ type: 1, causeIndex: 0, causePartition: 2 ** 32 }),
    'causePartition must be a uint32, causePartition=4294967296',
  );
  throwsWith(
    () => writer.bytes.call(new EnvelopeWriter()),
    'no envelope built: call build() first',
  );
});

test('EnvelopeView.wrap rejects ranges outside the bytes and root offsets outside the range', () => {
  const view = new EnvelopeView();
  assert.throws(
    () => view.wrap(new Uint8Array(16), 10, 8),
    /range must lie inside bytes, offset=10 length=8/,
  );
  assert.throws(
    () => view.wrap(new Uint8Array(16), 0, 4),
    /envelope must be at least 8 bytes, length=4/,
  );
  const bogus = new Uint8Array(16);
  new DataView(bogus.buffer).setInt32(0, 1000, true);
  assert.throws(() => view.wrap(bogus, 0, 16), /envelope root offset out of range/);
});

test('the view reads envelopes built by the generated flatc code directly (same wire format)', () => {
  const b = new Builder(64);
  const key = b.createString('from-flatc');
  Envelope.startEnvelope(b);
  Envelope.addType(b, 100);
  Envelope.addKey(b, key);
  Envelope.addEventTimeMs(b, 12.25);
  Envelope.finishEnvelopeBuffer(b, Envelope.endEnvelope(b));
  const bytes = b.asUint8Array();
  const view = new EnvelopeView().wrap(bytes, 0, bytes.length);
  assert.is(view.key, 'from-flatc');
  assert.is(view.eventTimeMs, 12.25);
  // And the other way round.
  const ours = new EnvelopeWriter().encode({ type: 5, key: UNICODE, causeIndex: 3, causeQueue: 7 });
  const generated = Envelope.getRootAsEnvelope(new ByteBuffer(ours));
  assert.is(generated.key(), UNICODE);
  assert.is(generated.cause()?.queue(), 7);
  assert.is(generated.cause()?.index(), 3);
});

test('any envelope the writer lays out reads back the same through EnvelopeView and the generated flatc code; 64-bit fields and the payload start 8-byte aligned', () => {
  const view = new EnvelopeView();
  // One writer for every case, with a small key cache, so reuse and cache eviction are exercised.
  const writer = new EnvelopeWriter({
    initialBytes: 64,
    keyCacheEntriesMax: 4,
    keyCacheLengthMax: 6,
  });
  fc.assert(
    fc.property(
      fc.record(
        {
          type: fc.integer({ min: 1, max: 0xffffffff }),
          key: fc.oneof(fc.constant(null), fc.string({ unit: 'grapheme', maxLength: 12 })),
          eventTimeMs: fc.double({ noNaN: true }),
          causeQueue: fc.integer({ min: 0, max: 0xffffffff }),
          causePartition: fc.integer({ min: 0, max: 0xffffffff }),
          causeIndex: fc.integer({ min: -1, max: Number.MAX_SAFE_INTEGER }),
          payload: fc.uint8Array({ maxLength: 600 }),
        },
        { requiredKeys: ['type'] },
      ),
      (e) => {
        const n = writer.build(e);
        // At an odd offset of a bigger array, as in a journal write buffer.
        const target = new Uint8Array(n + 16);
        writer.copyTo(target, 8);
        const bytes = target.subarray(8, 8 + n);
        const f = view.wrap(bytes, 0, n).toFields();
        const hasCause = e.causeIndex !== undefined && e.causeIndex >= 0;
        assert.is(f.type, e.type);
        assert.is(f.key, e.key ?? null);
        assert.ok(Object.is(f.eventTimeMs, e.eventTimeMs ?? 0), `eventTimeMs ${f.eventTimeMs}`);
        assert.is(f.causeIndex, hasCause ? e.causeIndex : -1);
        assert.is(f.causeQueue, hasCause ? (e.causeQueue ?? 0) : 0);
        assert.is(f.causePartition, hasCause ? (e.causePartition ?? 0) : 0);
        assert.equal([...f.payload], [...(e.payload ?? [])]);
        const g = Envelope.getRootAsEnvelope(new ByteBuffer(bytes.slice()));
        assert.is(g.type(), e.type);
        assert.is(g.key(), e.key ?? null);
        assert.is(g.payloadLength(), e.payload?.length ?? 0);
        assert.is(g.cause()?.index() ?? -1, hasCause ? e.causeIndex : -1);
        if ((e.payload?.length ?? 0) > 0) assert.is(view.payloadOffset % 8, 0, 'payload 8-aligned');
        assert.equal(writer.bytes(), bytes);
      },
    ),
    { numRuns: 2000 },
  );
});

test('a Change record as the payload of an envelope decodes in place (the payload is 8-byte aligned)', () => {
  const change = encodeChange(sampleChangeForNesting);
  const bytes = new EnvelopeWriter().encode({ type: EVENT_TYPE_CHANGE, key: 'k', payload: change });
  const view = new EnvelopeView().wrap(bytes, 0, bytes.length);
  assert.is(view.payloadOffset % 8, 0);
  assert.equal(decodeChange(view.payload), sampleChangeForNesting);
});

const sampleChangeForNesting: Change = {
  stagingId: '7',
  table: 't',
  op: 'insert',
  key: '["1"]',
  before: null,
  after: '{"id":"1"}',
  txid: '42',
  commitTimeMs: 1.5,
};

const sampleChange: Change = {
  stagingId: '12345678901234567890',
  table: 'pgbench_history',
  op: 'update',
  key: '["1","2"]',
  before: `{"note":${JSON.stringify(ESCAPES)},"delta":"-250"}`,
  after: `{"note":${JSON.stringify(UNICODE)},"delta":"1e400"}`,
  txid: '9007199254740993',
  commitTimeMs: 1_700_000_000_000.25,
};

test('a Change round-trips exactly, unicode and escapes included', () => {
  assert.equal(decodeChange(encodeChange(sampleChange)), sampleChange);
  for (const op of ['insert', 'update', 'delete', 'truncate'] as const) {
    const change = { ...sampleChange, op, key: UNICODE, table: ESCAPES };
    assert.equal(decodeChange(encodeChange(change)), change);
  }
});

test('a Change keeps null and empty before/after apart', () => {
  const cases: Array<[string | null, string | null]> = [
    [null, null],
    ['', ''],
    [null, ''],
    ['', null],
  ];
  for (const [before, after] of cases) {
    const change = { ...sampleChange, before, after };
    assert.equal(decodeChange(encodeChange(change)), change);
  }
});

test('a Change with a 2 MB after image round-trips', () => {
  const change = { ...sampleChange, op: 'insert' as const, before: null, after: TWO_MB };
  const decoded = decodeChange(encodeChange(change));
  assert.is(decoded.after?.length, TWO_MB.length);
  assert.ok(decoded.after === TWO_MB);
});

test('a Change inside an envelope inside a SharedArrayBuffer decodes in place at an offset', () => {
  const sab = new SharedArrayBuffer(1 << 16);
  const area = new Uint8Array(sab, 8);
  const writer = new EnvelopeWriter();
  const n = writer.encodeInto(
    { type: EVENT_TYPE_CHANGE, key: sampleChange.key, payload: encodeChange(sampleChange) },
    area,
    1001,
  );
  const view = new EnvelopeView().wrap(area, 1001, n);
  assert.is(view.type, EVENT_TYPE_CHANGE);
  assert.equal(decodeChange(view.payload), sampleChange);
  assert.equal(decodeChange(area, view.payloadOffset, view.payloadLength), sampleChange);
});

test('encodeChange and decodeChange reject bad input with a precise message', () => {
  assert.throws(
    () => encodeChange({ ...sampleChange, op: 'upsert' as 'insert' }),
    /change op must be insert\|update\|delete\|truncate\|read, op=upsert/,
  );
  assert.throws(
    () => encodeChange({ ...sampleChange, txid: 42 as unknown as string }),
    /change txid must be a string, txid=42/,
  );
  assert.throws(() => decodeChange(new Uint8Array(4)), /Change must be at least 8 bytes, length=4/);
  const noStagingId = new Builder(64);
  const t = noStagingId.createString('t');
  noStagingId.startObject(8);
  noStagingId.addFieldOffset(1, t, 0);
  noStagingId.addFieldInt8(2, 1, 0);
  noStagingId.finish(noStagingId.endObject());
  assert.throws(
    () => decodeChange(noStagingId.asUint8Array()),
    /Change is missing required field staging_id/,
  );
});

test('JSON payload helpers round-trip exact strings and reject values without JSON', () => {
  const value = { a: UNICODE, b: ESCAPES, n: [1, 2.5, null], nested: { t: true } };
  assert.equal(decodeJson(encodeJson(value)), value);
  const bytes = encodeJson(ESCAPES);
  const padded = new Uint8Array(bytes.length + 10);
  padded.set(bytes, 5);
  assert.is(decodeJson(padded, 5, bytes.length), ESCAPES);
  assert.throws(() => encodeJson(undefined), /value has no JSON representation: undefined/);
  assert.throws(() => decodeJson(encodeJson('x'), 0, 99), RangeError);
});

test.run();

test('ChangeRecordWriter: envelope and Change decode exactly, key stored once, payload self-contained', () => {
  const w = new ChangeRecordWriter(256);
  const lone = 'a\ud800b\udc00c';
  const cases: Change[] = [
    { ...sampleChange, installation: '0123456789abcdef' },
    { ...sampleChange, key: UNICODE, table: ESCAPES },
    { ...sampleChange, op: 'insert', before: null, after: '' },
    { ...sampleChange, op: 'delete', before: '', after: null, commitTimeMs: 0 },
    { ...sampleChange, op: 'truncate', key: '*', before: null, after: null, installation: '' },
    { ...sampleChange, op: 'read', key: lone, after: lone, stagingId: '' },
    { ...sampleChange, op: 'insert', before: null, after: TWO_MB },
  ];
  for (const change of cases) {
    const n = w.build(change, 1234.5);
    const bytes = w.bytes().slice();
    assert.is(bytes.length, n);
    assert.is(n % 4, 0);
    const view = new EnvelopeView().wrap(bytes, 0, n);
    assert.is(view.type, EVENT_TYPE_CHANGE);
    assert.is(view.eventTimeMs, 1234.5);
    assert.is(view.hasCause, false);
    // What the two-builder path makes of the same change (lone surrogates become U+FFFD in both).
    const expected = decodeChange(encodeChange(change));
    assert.is(view.key, expected.key);
    assert.equal(decodeChange(view.payload), expected);
    assert.equal(decodeChange(view.payload.slice()), expected);
    // The key's UTF-8 bytes appear once in the record.
    const keyBytes = Buffer.from(expected.key, 'utf8');
    if (keyBytes.length > 2) {
      const at = Buffer.from(bytes).indexOf(keyBytes);
      assert.ok(at > 0);
      assert.is(Buffer.from(bytes).indexOf(keyBytes, at + 1), -1);
    }
  }
  // Without an event time the envelope carries the commit time; copyTo lands at an offset.
  const n = w.build(sampleChange);
  const target = new Uint8Array(n + 9);
  assert.is(w.copyTo(target, 9), n);
  const view = new EnvelopeView().wrap(target, 9, n);
  assert.is(view.eventTimeMs, sampleChange.commitTimeMs);
  assert.equal(decodeChange(target, view.payloadOffset, view.payloadLength), sampleChange);
  assert.throws(() => w.copyTo(target, 10), /record of \d+ bytes does not fit at offset 10/);
});

test('ChangeRecordWriter rejects bad input with a precise message', () => {
  const w = new ChangeRecordWriter();
  assert.throws(
    () => w.build({ ...sampleChange, op: 'upsert' as 'insert' }),
    /change op must be insert\|update\|delete\|truncate\|read, op=upsert/,
  );
  assert.throws(
    () => w.build({ ...sampleChange, txid: 42 as unknown as string }),
    /change txid must be a string, txid=42/,
  );
  assert.throws(
    () => w.build({ ...sampleChange, after: 7 as unknown as string }),
    /change after must be a string, after=7/,
  );
  assert.throws(() => new ChangeRecordWriter(10), /initialBytes must be an integer >= 256/);
});
