/**
 * The `processors:` section of a topology file: defaults, and every problem reported at its
 * field as `file:line:col: path: message`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, parseTopology } from '../engine/config/index.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
/** Inline topologies are "located" in the processor fixtures dir so ./echo.ts resolves. */
const file = path.join(root, 'test', 'fixtures', 'processors', 'inline.yaml');
const compiled = (name: string) =>
  path.join(root, 'dist', 'test', 'fixtures', 'processors', `${name}.js`);
const yaml = (...lines: string[]) => lines.join('\n') + '\n';

function problems(text: string): string[] {
  try {
    parseTopology(text, file, { env: {} });
  } catch (e) {
    if (e instanceof ConfigError) return e.message.split('\n').map((l) => l.slice(file.length + 1));
    throw e;
  }
  throw new Error('expected a ConfigError, the topology loaded');
}

const QUEUES = [
  'name: t', //                     1
  'queues:', //                     2
  '  - name: orders', //            3
  '    partitions: 4', //           4
  '  - name: invoices', //          5
  '  - name: balances', //          6
  '    partitions: 2', //           7
  '  - name: dead', //              8
  'processors:', //                 9
];

test('a durable processor loads with its defaults: outputs [], group = name, codec json, settings {}; options as written', () => {
  const t = parseTopology(
    yaml(
      ...QUEUES,
      '  - name: billing',
      '    pattern: durable',
      '    module: ./echo.ts',
      '    inputs: [orders]',
      '    outputs: [invoices]',
      '    deadLetterTopic: dead',
      '    batchSizeMax: 100',
      '    retriesMax: 3',
    ),
    file,
    { env: {} },
  );
  assert.equal(t.processors, [
    {
      name: 'billing',
      pattern: 'durable',
      module: compiled('echo'),
      inputs: ['orders'],
      outputs: ['invoices'],
      deadLetterTopic: 'dead',
      batchSizeMax: 100,
      retriesMax: 3,
      group: 'billing',
      codec: 'json',
      settings: {},
    },
  ]);
  assert.equal(structuredClone(t), t, 'plain data, posted to the worker as is');
});

test('an unknown pattern, an unknown queue and an option of another pattern are reported at their fields', () => {
  const text = yaml(
    ...QUEUES,
    '  - name: a', //                    10
    '    pattern: durabel', //           11
    '    module: ./echo.ts', //          12
    '    inputs: [orderz]', //           13
    '  - name: b', //                    14
    '    pattern: pubsub', //            15
    '    module: ./log-records.ts', //   16
    '    inputs: [orders]', //           17
    '    group: g', //                   18
    '    outputs: [invoices]', //        19
  );
  assert.equal(problems(text), [
    '11:14: processors[0].pattern: must be one of durable, state-and-event, pubsub, compacted, rpc, got "durabel" (did you mean "durable"?)',
    '13:14: processors[0].inputs[0]: unknown queue "orderz" (known: orders, invoices, balances, dead)',
    '18:5: processors[1].group: group does not apply to pattern pubsub (only to durable, state-and-event)',
    '19:14: processors[1].outputs: outputs lists 1 topics; a pubsub processor reads one topic and writes nothing (at most once, no outputs)',
  ]);
});

test("state-and-event needs a state topic with at least the event topic's partitions; rpc needs one response topic as wide as the requests", () => {
  const text = yaml(
    ...QUEUES,
    '  - name: bal', //                  10
    '    pattern: state-and-event', //   11
    '    module: ./balance.ts', //       12
    '    inputs: [orders]', //           13
    '    stateTopic: balances', //       14
    '  - name: nostate', //              15
    '    pattern: state-and-event', //   16
    '    module: ./balance.ts', //       17
    '    inputs: [orders]', //           18
    '  - name: rpc', //                  19
    '    pattern: rpc', //               20
    '    module: ./upper.ts', //         21
    '    inputs: [orders]', //           22
    '    outputs: [invoices]', //        23
  );
  assert.equal(problems(text), [
    '14:17: processors[0].stateTopic: queue "balances" has 2 partitions; the state topic needs at least the event topic\'s 4 (a key\'s state and events share a partition number)',
    '16:14: processors[1].pattern: a state-and-event processor needs stateTopic (its per-key states, as many partitions as the event topic)',
    '23:15: processors[2].outputs[0]: queue "invoices" has 1 partitions; an rpc response topic needs at least the request topic\'s 4 (each response goes to its request\'s partition number)',
  ]);
});

test('on the journal bus a processor topic that is also a service or capture queue is refused, naming both fields', () => {
  const text = yaml(
    'name: t', //                                                 1
    'queues:', //                                                 2
    '  - name: in', //                                            3
    '  - name: out', //                                           4
    'services:', //                                               5
    '  - name: s', //                                             6
    '    module: ../config/services/running-total.ts', //         7
    '    inputs: [in]', //                                        8
    '    output: out', //                                         9
    'processors:', //                                             10
    '  - name: p', //                                             11
    '    pattern: durable', //                                    12
    '    module: ./echo.ts', //                                   13
    '    inputs: [out]', //                                       14
  );
  assert.equal(problems(text), [
    "14:14: processors[0].inputs[0]: queue \"out\" is also services[0].output (line 9); on the journal bus a processor's topics live in the bus directory (<dataDir>/bus), services' and capture's queues in <dataDir>/queues, so one queue cannot be both yet; use another queue",
  ]);
});

test('a missing module, a duplicate name and member fencing on kafka are reported', () => {
  const text = yaml(
    'name: t', //                     1
    'bus: { kind: kafka, brokers: ["127.0.0.1:9092"] }', // 2
    'queues:', //                     3
    '  - name: in', //                4
    'processors:', //                 5
    '  - name: p', //                 6
    '    pattern: durable', //        7
    '    module: ./nope.ts', //       8
    '    inputs: [in]', //            9
    '  - name: p', //                 10
    '    pattern: durable', //        11
    '    module: ./echo.ts', //       12
    '    inputs: [in]', //            13
    '    fencing: member', //         14
  );
  const got = problems(text);
  assert.equal(got, [
    `8:13: processors[0].module: module file not found: ${path.join(path.dirname(file), 'nope.ts')}`,
    '10:11: processors[1].name: duplicate processor name "p" (first defined at line 6)',
    '14:14: processors[1].fencing: fencing member on a kafka bus lets a zombie member commit (kafkajs sends no KIP-447 generation): every process of the topology would need its own transactionalId; use partition (the default on kafka)',
  ]);
});

test('pool: { threads } on a durable or pubsub processor loads with its defaults (batchSize 64, 2 x threads in flight); options as written', () => {
  const t = parseTopology(
    yaml(
      ...QUEUES,
      '  - name: billing',
      '    pattern: durable',
      '    module: ./echo.ts',
      '    inputs: [orders]',
      '    outputs: [invoices]',
      '    pool: { threads: 3 }',
      '  - name: audit',
      '    pattern: pubsub',
      '    module: ./log-records.ts',
      '    inputs: [orders]',
      '    pool: { threads: 2, batchSize: 500, batchesInFlightMax: 1 }',
    ),
    file,
    { env: {} },
  );
  assert.equal(t.processors[0]!.pool, { threads: 3, batchSize: 64, batchesInFlightMax: 6 });
  assert.equal(t.processors[1]!.pool, { threads: 2, batchSize: 500, batchesInFlightMax: 1 });
});

test('pool is refused on state-and-event, compacted and rpc with the reason, and its fields are checked where they are written', () => {
  const text = yaml(
    ...QUEUES,
    '  - name: bal', //                  10
    '    pattern: state-and-event', //   11
    '    module: ./balance.ts', //       12
    '    inputs: [orders]', //           13
    '    stateTopic: orders', //         14
    '    pool: { threads: 2 }', //       15
    '  - name: a', //                    16
    '    pattern: durable', //           17
    '    module: ./echo.ts', //          18
    '    inputs: [orders]', //           19
    '    pool: { threads: 0, batchSize: 8, thread: 1 }', // 20
    '  - name: b', //                    21
    '    pattern: durable', //           22
    '    module: ./echo.ts', //          23
    '    inputs: [orders]', //           24
    '    pool: { batchSize: 8 }', //     25
  );
  assert.equal(problems(text), [
    '14:17: processors[0].stateTopic: "orders" is also an input or output of the processor; the state topic is written only with the states',
    "15:5: processors[0].pool: pool does not apply to pattern state-and-event: each event's handler call needs its key's state as the previous event of that key left it; a pool runs stateless handlers only (durable, pubsub)",
    '20:22: processors[1].pool.threads: must be in [1, 256], got 0',
    '20:39: processors[1].pool.thread: unknown field "thread" (did you mean "threads"?)',
    '25:11: processors[2].pool.threads: missing required field',
  ]);
});

test('a service input that a capture table fills with format json is refused (a service reads envelopes)', () => {
  assert.equal(
    problems(
      yaml(
        'name: t', //                                                            1
        'bus: { kind: kafka, brokers: ["127.0.0.1:9092"] }', //                  2
        'queues:', //                                                            3
        '  - { name: changes }', //                                              4
        '  - { name: out }', //                                                  5
        'capture:', //                                                           6
        '  - name: db', //                                                       7
        '    database: { dialect: postgres, url: "postgres://h@127.0.0.1/x" }', // 8
        '    tables:', //                                                        9
        '      - { table: a, operations: [insert], target: changes, format: json }', // 10
        'services:', //                                                          11
        '  - { name: s, module: ./echo.ts, inputs: [changes], output: out }', // 12
      ),
    ),
    [
      '12:44: services[0].inputs[0]: queue "changes" gets capture[0].tables[0] as format json (line 10), and a service reads Sluice envelopes: use format envelope for it, or read it with a processor (codec json)',
    ],
  );
});

test.run();

/** A capture source of one table into `target` on the journal bus, then one durable processor. */
const captureInto = (pumps: number, ...tables: string[]) =>
  yaml(
    'name: t', //                                                            1
    'queues:', //                                                            2
    '  - { name: changes, partitions: 4 }', //                               3
    '  - { name: other, partitions: 1 }', //                                 4
    'capture:', //                                                           5
    '  - name: db', //                                                       6
    '    database: { dialect: postgres, url: "postgres://h@127.0.0.1/x" }', // 7
    `    pumps: ${pumps}`, //                                                8
    '    tables:', //                                                        9
    ...tables, //                                                            10...
    'processors:',
    '  - { name: p, pattern: durable, module: ./echo.ts, inputs: [changes] }',
  );

test('on the journal bus a capture target that is a processor topic is shipped into the bus: any pump count, format json allowed', () => {
  const t = parseTopology(
    captureInto(
      2,
      '      - { table: a, operations: [insert], target: changes, format: json }',
      '      - { table: b, operations: [insert], target: changes }',
    ),
    file,
    { env: {} },
  );
  assert.equal(t.capture[0]!.pumps, 2);
  assert.equal(
    t.capture[0]!.tables.map((x) => [x.table, x.target, x.format ?? 'envelope']),
    [
      ['a', 'changes', 'json'],
      ['b', 'changes', 'envelope'],
    ],
  );
});

test('on the journal bus a capture source that ships into a processor topic and a journal queue is refused at the queue', () => {
  assert.equal(
    problems(
      captureInto(
        1,
        '      - { table: a, operations: [insert], target: changes }',
        '      - { table: b, operations: [insert], target: other, format: json }',
      ),
    ),
    [
      '11:51: capture[0].tables[1].target: queue "other" is not a processor topic but "changes" of the same capture source is; on the journal bus a capture source ships either into processor topics (the bus) or into journal queues (services), not both: use two capture sources',
      "11:66: capture[0].tables[1].format: format json needs a kafka bus (bus: { kind: kafka, brokers: [...] }); the journal's readers take the envelope (a sink with format json ships a journal queue to Kafka as JSON)",
    ],
  );
});
