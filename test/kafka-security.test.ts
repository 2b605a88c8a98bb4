/**
 * TLS and SASL to Kafka against a real broker set up for it (tools/kafka/kafka.sh --secure: a
 * SASL_SSL listener with a CA made for the run, PLAIN and SCRAM-SHA-512, user `sluice`): a
 * topology's `bus` section with a CA file and a password file connects, produces and consumes;
 * a wrong password, no CA, and plaintext to the TLS port are refused, and no password appears in
 * any error. A whole topology on that bus (a service, a durable processor, the queue appender)
 * runs over TLS and SCRAM. Private broker (its own listeners), stopped at the end.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKafkaBus, kafkaBusOptionsOf, kafkaSecurityOptions } from '../engine/bus/index.js';
import type { BusBackend } from '../engine/bus/index.js';
import { parseTopology } from '../engine/config/index.js';
import { startKafka } from '../testing/kafka-broker.js';
import type { KafkaCluster } from '../testing/kafka-broker.js';
import { readFileSync } from 'node:fs';
import { loadTopology, openQueueAppender, startTopology } from '../index.js';
import { decodeJson, EnvelopeView } from '../engine/codec/index.js';
import { bytes, text, waitForRecords } from './patterns-helpers.js';

const runningSum = new URL('./fixtures/services/running-sum.js', import.meta.url).pathname;
const echo = new URL('./fixtures/processors/echo.js', import.meta.url).pathname;

let cluster: KafkaCluster;
let dir = '';
test.before(async () => {
  cluster = await startKafka({ secure: true });
  dir = mkdtempSync(path.join(tmpdir(), 'sluice-kafka-sec-'));
});
test.after(async () => {
  await cluster?.stop({ kill: true });
  rmSync(dir, { recursive: true, force: true });
});

/** Creates `topic`, sends one record and reads it back through `bus`; closes the bus. */
async function roundTrip(bus: BusBackend, topic: string): Promise<string> {
  try {
    await bus.createTopics([{ name: topic, partitions: 1 }]);
    const producer = await bus.producer();
    await producer.send([{ topic, key: 'k', value: new TextEncoder().encode('hello') }]);
    const consumer = await bus.consumer();
    await consumer.assign([{ topic, partition: 0 }]);
    for (let i = 0; i < 50; i++) {
      const got = await consumer.poll({ timeoutMs: 200 });
      if (got.length > 0) return new TextDecoder().decode(got[0]!.value!);
    }
    throw new Error(`no record on ${topic} in 10 s`);
  } finally {
    await bus.close();
  }
}

/** The error of `fn`, failing the test when it resolves. */
async function failure(fn: () => Promise<unknown>): Promise<Error> {
  try {
    await fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a failure');
}

test('a topology bus with a CA file and a SCRAM-SHA-512 password file connects, produces and consumes', async () => {
  const s = cluster.secure!;
  const file = path.join(dir, 't.yaml');
  const t = parseTopology(
    [
      'name: sec',
      'bus:',
      '  kind: kafka',
      `  brokers: ["${s.broker}"]`,
      `  tls: { caFile: ${s.caFile} }`,
      `  sasl: { mechanism: scram-sha-512, username: ${s.username}, passwordFile: ${s.passwordFile} }`,
      '',
    ].join('\n'),
    file,
  );
  assert.is(t.bus.kind, 'kafka');
  if (t.bus.kind !== 'kafka') return;
  const bus = createKafkaBus(kafkaBusOptionsOf(t.bus, 'test'));
  assert.is(await roundTrip(bus, 'sec-scram'), 'hello');
});

test('PLAIN with the password from the environment (${VAR}) works too', async () => {
  const s = cluster.secure!;
  const password = readFileSync(s.passwordFile, 'utf8').trim();
  const t = parseTopology(
    `name: sec\nbus: { kind: kafka, brokers: ["${s.broker}"], tls: { caFile: ${s.caFile} }, sasl: { mechanism: plain, username: sluice, password: "\${KAFKA_PW}" } }\n`,
    path.join(dir, 't.yaml'),
    { env: { KAFKA_PW: password } },
  );
  if (t.bus.kind !== 'kafka') throw new Error('kafka bus expected');
  assert.is(await roundTrip(createKafkaBus(kafkaBusOptionsOf(t.bus)), 'sec-plain'), 'hello');
});

test('a wrong password is refused as an authentication failure that shows no password', async () => {
  const s = cluster.secure!;
  const wrong = 'wrong-secret-8d1f';
  const bus = createKafkaBus({
    brokers: [s.broker],
    clientId: 'sec-wrong',
    ...kafkaSecurityOptions(
      { caFile: s.caFile, rejectUnauthorized: true },
      { mechanism: 'scram-sha-512', username: 'sluice', password: wrong },
    ),
  });
  const e = await failure(() => roundTrip(bus, 'sec-wrong'));
  assert.match(e.message, /authentication failed/i);
  assert.not.match(e.message, wrong);
  assert.not.match(e.message, readFileSync(s.passwordFile, 'utf8').trim());
});

test('a broker certificate from an unknown CA is refused (no caFile: the system CAs)', async () => {
  const s = cluster.secure!;
  const bus = createKafkaBus({
    brokers: [s.broker],
    clientId: 'sec-noca',
    ...kafkaSecurityOptions(
      { rejectUnauthorized: true },
      { mechanism: 'scram-sha-512', username: 'sluice', passwordFile: s.passwordFile },
    ),
  });
  const e = await failure(() => roundTrip(bus, 'sec-noca'));
  assert.match(e.message, /certificate/i);
});

test('unreadable TLS and password files are named in the error, without their contents', () => {
  const missing = path.join(dir, 'missing.pem');
  assert.throws(
    () => kafkaSecurityOptions({ caFile: missing, rejectUnauthorized: true }),
    (e: Error) => e.message === `bus.tls.caFile: cannot read ${missing}: ENOENT`,
  );
  const pw = path.join(dir, 'pw');
  writeFileSync(pw, 'top-secret\n');
  const o = kafkaSecurityOptions(undefined, {
    mechanism: 'plain',
    username: 'u',
    passwordFile: pw,
  });
  assert.equal(o.sasl, { mechanism: 'plain', username: 'u', password: 'top-secret' });
  assert.throws(
    () => kafkaSecurityOptions(undefined, { mechanism: 'plain', username: 'u' }),
    /exactly one of password and passwordFile/,
  );
  assert.throws(
    () => kafkaSecurityOptions({ certFile: pw, rejectUnauthorized: true }),
    /certFile and keyFile go together/,
  );
});

test('a topology on the TLS + SCRAM bus: its service, its durable processor and the queue appender all connect', async () => {
  const s = cluster.secure!;
  const x = `secrun-${process.pid}`;
  const file = path.join(dir, 'run.yaml');
  writeFileSync(
    file,
    [
      'name: secrun',
      `dataDir: ${dir}/data`,
      'bus:',
      '  kind: kafka',
      `  brokers: ["${s.broker}"]`,
      `  tls: { caFile: ${s.caFile} }`,
      `  sasl: { mechanism: scram-sha-512, username: ${s.username}, passwordFile: ${s.passwordFile} }`,
      'queues:',
      ...['sin', 'sout', 'pin', 'pout'].map((q) => `  - { name: ${x}-${q} }`),
      'services:',
      '  - name: sum',
      `    module: ${runningSum}`,
      `    inputs: [${x}-sin]`,
      `    output: ${x}-sout`,
      'processors:',
      '  - name: echo',
      '    pattern: durable',
      `    module: ${echo}`,
      `    inputs: [${x}-pin]`,
      `    outputs: [${x}-pout]`,
      `    group: ${x}-echo`,
      '    codec: string',
      '',
    ].join('\n'),
  );
  const topology = loadTopology(file);
  const logs: string[] = [];
  const running = await startTopology(topology, { log: (m: string) => logs.push(m) });
  try {
    const appender = openQueueAppender(topology, `${x}-sin`);
    for (let i = 1; i <= 3; i++) appender.appendJson('k', { v: i, n: i });
    appender.close();
    const bus = running.bus!;
    const p = await bus.producer();
    try {
      await p.send(['a', 'b', 'c'].map((v) => ({ topic: `${x}-pin`, key: v, value: bytes(v) })));
    } finally {
      await p.close();
    }
    const pout = await waitForRecords(bus, `${x}-pout`, 3, 30_000);
    assert.equal(pout.map(text), ['o:a', 'o:b', 'o:c'], 'the processor, once each, in order');
    const sout = await waitForRecords(bus, `${x}-sout`, 3, 30_000);
    const view = new EnvelopeView();
    const sums = sout.map((r) => {
      view.wrap(r.value!, 0, r.value!.length);
      return (decodeJson(view.payload) as { sum: number }).sum;
    });
    assert.equal(sums, [1, 3, 6], 'the service, once each, in order');
    assert.equal(
      logs.filter((m) => /restarting|failed/.test(m)),
      [],
      'no actor failed or restarted',
    );
  } finally {
    const result = await running.stop();
    assert.equal(result.terminated, []);
  }
});

test.run();
