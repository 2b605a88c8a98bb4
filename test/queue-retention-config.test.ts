/**
 * `queues[].retention` in a topology file: defaults, the schema's limits, and the cross-field
 * checks, each refused as `file:line:col: path: message`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ConfigError, parseTopology } from '../index.js';
import { TOPOLOGY_LIMITS } from '../engine/config/index.js';

const file = '/tmp/retention-topology.yaml';

function problems(text: string): string[] {
  try {
    parseTopology(text, file, { env: {} });
  } catch (e) {
    if (e instanceof ConfigError) return e.message.split('\n');
    throw e;
  }
  throw new Error('expected a ConfigError, the topology loaded');
}

test('retention is absent by default; deleteUncommitted defaults to false', () => {
  const t = parseTopology(
    [
      'name: r',
      'queues:',
      '  - name: a',
      '  - name: b',
      '    retention: { bytesMax: 1048576, ageMsMax: 60000 }',
      '',
    ].join('\n'),
    file,
    { env: {} },
  );
  assert.is(t.queues[0].retention, undefined);
  assert.equal(t.queues[1].retention, {
    bytesMax: 1048576,
    ageMsMax: 60000,
    deleteUncommitted: false,
  });
});

test('a retention without a bound, with an unknown field, or out of range is refused at its field', () => {
  const max = TOPOLOGY_LIMITS.retentionBytesMax[1];
  assert.equal(
    problems(
      [
        'name: r',
        'queues:',
        '  - name: a',
        '    retention: { deleteUncommitted: true }',
        '  - name: b',
        '    retention: { bytes: 10 }',
        '  - name: c',
        `    retention: { bytesMax: ${max + 1}, ageMsMax: -1 }`,
        '',
      ].join('\n'),
    ),
    [
      `${file}:4:16: queues[0].retention: give bytesMax (bytes) or ageMsMax (ms), or both`,
      `${file}:6:16: queues[1].retention: give bytesMax (bytes) or ageMsMax (ms), or both`,
      `${file}:6:18: queues[1].retention.bytes: unknown field "bytes" (did you mean "bytesMax"?)`,
      `${file}:8:28: queues[2].retention.bytesMax: must be in [0, ${max}], got ${max + 1}`,
      `${file}:8:56: queues[2].retention.ageMsMax: must be in [0, ${TOPOLOGY_LIMITS.retentionAgeMsMax[1]}], got -1`,
    ],
  );
});

test("retention is refused on a kafka bus, on a processor topic, and on a sink's queue unless deleteUncommitted", () => {
  const kafka = problems(
    [
      'name: r',
      'bus: { kind: kafka, brokers: ["127.0.0.1:9092"] }',
      'queues:',
      '  - { name: a, retention: { bytesMax: 4096 } }',
      '',
    ].join('\n'),
  );
  assert.ok(
    kafka.some(
      (l) =>
        l.startsWith(`${file}:4:`) &&
        l.includes('queues[0].retention: retention applies to the embedded journal'),
    ),
    kafka.join('\n'),
  );
  const sink = [
    'name: r',
    'queues:',
    '  - { name: a, retention: { bytesMax: 4096 } }',
    'sinks:',
    '  - { name: s, from: a, to: { brokers: ["127.0.0.1:9092"] } }',
    '',
  ].join('\n');
  const lines = problems(sink);
  assert.ok(
    lines.some((l) => l.startsWith(`${file}:3:`) && l.includes('forwarded by sink "s"')),
    lines.join('\n'),
  );
  const t = parseTopology(
    sink.replace('bytesMax: 4096', 'bytesMax: 4096, deleteUncommitted: true'),
    file,
    { env: {} },
  );
  assert.is(t.queues[0].retention?.deleteUncommitted, true);
});

test.run();
