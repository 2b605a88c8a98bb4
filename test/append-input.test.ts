/**
 * Bad records through `sluice append` and the embedding API (openQueueAppender): keys that are
 * not strings, invalid UTF-8, oversized and deeply nested records are refused with the line (or
 * the call) that carried them, never changed; what was accepted before stays appended and
 * durable, and the message says how many.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  loadTopology,
  openQueueAppender,
  partitionDir,
  RecordInputError,
  JSON_DEPTH_MAX,
  startTopology,
} from '../index.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  decodeEnvelope,
  encodeJson,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
} from '../engine/codec/index.js';
import { sluice } from './lib/cli.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;
const passThrough = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;

let dir = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-append-'));
});
test.after.each(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Queue `in` (read by a service: records up to rings.recordBytesMax, 131064 here) and `free` (read by none). */
function writeTopology(): string {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `name: app\ndataDir: ./data\nrings: { recordBytesMax: 131064 }\nqueues:\n  - { name: in }\n  - { name: out }\n  - { name: free }\n` +
      `services:\n  - name: pass\n    module: ${passThrough}\n    inputs: [in]\n    output: out\n`,
  );
  return file;
}

/** Every record of partition 0 of `queue`: key and payload bytes. */
function records(file: string, queue: string): Array<{ key: string | null; payload: Buffer }> {
  const t = loadTopology(file);
  const tailer = Tailer.open({ dir: partitionDir(t, queue, 0) });
  const out: Array<{ key: string | null; payload: Buffer }> = [];
  try {
    for (let r = tailer.next(); r !== null; r = tailer.next()) {
      const e = decodeEnvelope(r.bytes);
      out.push({ key: e.key, payload: Buffer.from(e.payload) });
    }
  } finally {
    tailer.close();
  }
  return out;
}

test('a JSON object, array or number as a key is refused at its line (was: "[object Object]", distinct keys collided)', async () => {
  const file = writeTopology();
  for (const [key, what] of [
    ['{"id":1}', 'an object'],
    ['[1,2]', 'an array'],
    ['42', 'a number (42)'],
    ['true', 'a boolean (true)'],
  ] as const) {
    const r = await sluice(
      ['append', file, 'free'],
      `{"key":"a"}\n{"key":"b"}\n{"key":${key},"n":3}\n{"key":"d"}\n`,
    );
    assert.is(r.code, 2, r.err);
    assert.is(
      r.err.trim(),
      `sluice: stdin line 3: the key field "key" is ${what}; a key is a JSON string ` +
        "(--key-encoding json keys by the field's JSON text); 2 events before it were appended",
    );
  }
  // Each run appended its first two lines, nothing else.
  assert.equal(
    records(file, 'free').map((r) => r.key),
    ['a', 'b', 'a', 'b', 'a', 'b', 'a', 'b'],
  );
});

test('--key-encoding json keys by canonical JSON text: equal objects share a key, distinct ones do not', async () => {
  const file = writeTopology();
  const r = await sluice(
    ['append', file, 'free', '--key-encoding', 'json'],
    '{"key":{"b":2,"a":1}}\n{"key":{"a":1,"b":2}}\n{"key":{"a":1,"b":3}}\n{"key":[1,"x"]}\n{"key":"s"}\n{"key":7}\n',
  );
  assert.is(r.code, 0, r.err);
  assert.equal(
    records(file, 'free').map((x) => x.key),
    ['{"a":1,"b":2}', '{"a":1,"b":2}', '{"a":1,"b":3}', '[1,"x"]', '"s"', '7'],
  );
  const bad = await sluice(['append', file, 'free', '--key-encoding', 'yaml'], '');
  assert.is(bad.code, 2);
  assert.match(bad.err, '--key-encoding must be one of string, json, got "yaml"');
});

test('invalid UTF-8 is refused at its line and byte (was: replaced by U+FFFD silently); --raw-type appends it as is', async () => {
  const file = writeTopology();
  const bad = Buffer.concat([
    Buffer.from('{"key":"a"}\n{"key":"b"}\n{"key":"'),
    Buffer.from([0xff, 0xfe]),
    Buffer.from('"}\n{"key":"d"}\n'),
  ]);
  const r = await sluice(['append', file, 'free'], bad);
  assert.is(r.code, 2, r.err);
  assert.is(
    r.err.trim(),
    'sluice: stdin line 3: byte 9 (0xff) is not UTF-8; declare the lines binary with ' +
      '--raw-type <type> to append them as they are; 2 events before it were appended',
  );
  assert.equal(
    records(file, 'free').map((x) => x.payload.toString()),
    ['{"key":"a"}', '{"key":"b"}'],
  );
  // Declared binary: every line appended byte for byte (CR LF endings drop the CR).
  const raw = await sluice(
    ['append', file, 'in', '--raw-type', '100', '--key', 'bin'],
    Buffer.concat([bad, Buffer.from('x\r\ny')]),
  );
  assert.is(raw.code, 0, raw.err);
  const got = records(file, 'in');
  assert.equal(
    got.map((x) => x.key),
    ['bin', 'bin', 'bin', 'bin', 'bin', 'bin'],
  );
  assert.equal(
    got[2]!.payload,
    Buffer.concat([Buffer.from('{"key":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
  );
  assert.equal(
    got.slice(4).map((x) => x.payload.toString()),
    ['x', 'y'],
  );
  const low = await sluice(['append', file, 'in', '--raw-type', '7'], 'x\n');
  assert.is(low.code, 2);
  assert.match(low.err, '--raw-type must be an integer >= 100, got "7"');
});

test("an oversized record is refused at its line with the queue's limit; what came before stays appended", async () => {
  const file = writeTopology();
  // 100 KiB of value: under the 128 KiB limit of "in" as a line, over it as a record with the
  // key twice more (the key field inside the value, and the envelope's key).
  const big = `{"key":"${'k'.repeat(20_000)}","v":"${'x'.repeat(100_000)}"}`;
  const r = await sluice(['append', file, 'in'], `{"key":"a"}\n${big}\n`);
  assert.is(r.code, 2, r.err);
  assert.match(
    r.err,
    /^sluice: stdin line 2: record of 1400\d\d bytes exceeds the 131064-byte limit of queue "in" \(rings.recordBytesMax: a service reads "in"\); 1 event before it was appended\n$/,
  );
  // A line longer than the limit is refused before it is read whole.
  const huge = `{"key":"h","v":"${'x'.repeat(300_000)}"}`;
  const h = await sluice(
    ['append', file, 'in'],
    `{"key":"b"}\n{"key":"c"}\n${huge}\n{"key":"d"}\n`,
  );
  assert.is(h.code, 2, h.err);
  assert.is(
    h.err.trim(),
    'sluice: stdin line 3: the line is longer than 131064 bytes, the record limit of queue "in"; 2 events before it were appended',
  );
  assert.equal(
    records(file, 'in').map((x) => x.key),
    ['a', 'b', 'c'],
  );
  // A queue no service reads takes records up to the journal's limit.
  const free = await sluice(['append', file, 'free'], `${huge}\n`);
  assert.is(free.code, 0, free.err);
});

test('a value nested deeper than JSON_DEPTH_MAX is refused at its line, before parsing (100,000 levels too)', async () => {
  const file = writeTopology();
  const deep = (n: number) => `{"key":"z","v":${'['.repeat(n)}${']'.repeat(n)}}`;
  const ok = await sluice(['append', file, 'free'], `${deep(JSON_DEPTH_MAX - 1)}\n`);
  assert.is(ok.code, 0, ok.err);
  for (const n of [JSON_DEPTH_MAX, 100_000]) {
    const r = await sluice(['append', file, 'free'], `{"key":"a"}\n${deep(n)}\n`);
    assert.is(r.code, 2, r.err);
    assert.is(
      r.err.trim(),
      `sluice: stdin line 2: the JSON value is nested more than ${JSON_DEPTH_MAX} levels deep; 1 event before it was appended`,
    );
  }
  // Brackets inside strings do not count.
  const str = await sluice(['append', file, 'free'], `{"key":"[[[","v":"${'['.repeat(200)}"}\n`);
  assert.is(str.code, 0, str.err);
  assert.is(records(file, 'free').length, 4);
});

test('openQueueAppender refuses non-string keys, lone surrogates, deep or cyclic values and oversized records, keeping earlier appends', () => {
  const file = writeTopology();
  const t = loadTopology(file);
  const a = openQueueAppender(t, 'in');
  assert.is(a.recordBytesMax, 131064);
  a.appendJson('first', { n: 1 });
  const refused = (f: () => unknown, message: string | RegExp) => {
    try {
      f();
    } catch (e) {
      assert.instance(e, RecordInputError);
      if (typeof message === 'string') assert.is((e as Error).message, message);
      else assert.match((e as Error).message, message);
      return;
    }
    assert.unreachable(`expected RecordInputError: ${message}`);
  };
  refused(
    () => a.appendJson({ id: 1 } as unknown as string, {}),
    'key must be a string, got an object',
  );
  refused(() => a.appendJson(['x'] as unknown as string, {}), 'key must be a string, got an array');
  refused(() => a.appendJson(7 as unknown as string, {}), 'key must be a string, got number');
  refused(
    () => a.appendJson('\ud800', {}),
    'key is not well-formed Unicode (it has a lone surrogate)',
  );
  let nested: unknown = 1;
  for (let i = 0; i < JSON_DEPTH_MAX + 1; i++) nested = [nested];
  refused(
    () => a.appendJson('k', nested),
    `value is nested more than ${JSON_DEPTH_MAX} levels deep (arrays and objects), or is cyclic`,
  );
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  refused(
    () => a.appendJson('k', cyclic),
    `value is nested more than ${JSON_DEPTH_MAX} levels deep (arrays and objects), or is cyclic`,
  );
  refused(
    () => a.appendJson('k', { big: 1n }),
    'value has no JSON form: Do not know how to serialize a BigInt',
  );
  refused(
    () => a.appendJson('k', 'x'.repeat(131064)),
    /^record of 1311\d\d bytes exceeds the 131064-byte limit of queue "in" \(rings.recordBytesMax: a service reads "in"\)$/,
  );
  refused(
    () => a.appendBytes(100, 'k', 'text' as unknown as Uint8Array),
    'payload must be a Uint8Array, got string',
  );
  a.appendJson('second', { n: 2 });
  a.close();
  assert.equal(
    records(file, 'in').map((x) => x.key),
    ['first', 'second'],
  );
});

test('a record too large for the rings reaches the service by reference to the journal (was: it failed its reader)', async () => {
  const file = path.join(dir, 'small.yaml');
  fs.writeFileSync(
    file,
    `name: small\ndataDir: ./data\nrings: { capacityBytes: 4096 }\n` +
      `queues:\n  - { name: in }\n  - { name: out }\nservices:\n  - name: pass\n    module: ${passThrough}\n    inputs: [in]\n    output: out\n`,
  );
  const t = loadTopology(file);
  // Written past the producer (which refuses it): as an older version or another tool would.
  const a = Appender.open({ dir: partitionDir(t, 'in', 0) });
  const big = { v: 'x'.repeat(1000) };
  a.append(
    new EnvelopeWriter().encode({ type: EVENT_TYPE_JSON, key: 'k', payload: encodeJson(big) }),
  );
  a.close();
  const running = await startTopology(t, { log: () => {} });
  try {
    const deadline = Date.now() + 30_000;
    while (
      Date.now() < deadline &&
      running.supervisor.actors().every((x) => x.counters.eventsOut === 0)
    ) {
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await running.stop();
  }
  const out = records(file, 'out');
  assert.is(out.length, 1);
  assert.is(out[0]!.key, 'k');
  assert.equal(JSON.parse(out[0]!.payload.toString('utf8')), big);
});

test.run();
