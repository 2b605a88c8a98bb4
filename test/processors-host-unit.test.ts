/**
 * The processor host's pattern starters without a worker (engine/processors/patterns.ts), on a
 * journal bus in a temporary directory: the table has a starter for every `processors[].pattern`
 * value; a durable processor's outputs commit once, in order, a handler that throws is
 * dead-lettered (counted as an error, the batch goes on), and an output to a topic outside
 * `outputs` fails the batch instead of being written.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Counter, COUNTER_SLOTS } from '../engine/actor/index.js';
import { createJournalBus, type BusBackend } from '../engine/bus/index.js';
import { PROCESSOR_PATTERN_VALUES, type TopologyProcessor } from '../engine/config/index.js';
import type { PatternRecord } from '../engine/patterns/index.js';
import {
  PROCESSOR_PATTERNS,
  startProcessorPattern,
  type Handler,
  type ProcessorData,
} from '../engine/processors/index.js';
import { bytes, text, waitForRecords } from './patterns-helpers.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-proc-unit-'));
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A durable processor entry `name`: `in` -> `out`, string codec, dead letters to `dead`. */
function durable(name: string): TopologyProcessor {
  return {
    name,
    pattern: 'durable',
    module: `${name}.js`,
    inputs: ['in'],
    outputs: ['out'],
    group: `${name}-group`,
    codec: 'string',
    deadLetterTopic: 'dead',
    retriesMax: 1,
    retryBackoffMs: 1,
    settings: {},
  };
}

/** A bus in its own directory with topics in, out, dead (1 partition each) and `inputs` in `in`. */
async function busWith(name: string, inputs: string[]): Promise<BusBackend> {
  const bus = await createJournalBus({ dir: path.join(dir, name), fsync: 'none' });
  await bus.createTopics(['in', 'out', 'dead'].map((t) => ({ name: t, partitions: 1 })));
  const p = await bus.producer();
  await p.send(inputs.map((v, i) => ({ topic: 'in', key: `k${i}`, value: bytes(v) })));
  await p.close();
  return bus;
}

test('a starter for every processors[].pattern value', () => {
  assert.equal(Object.keys(PROCESSOR_PATTERNS).sort(), [...PROCESSOR_PATTERN_VALUES].sort());
});

test('durable: outputs once in order, a throwing handler dead-lettered and counted, no worker', async () => {
  const bus = await busWith('durable', ['a', 'boom', 'c']);
  const handler: Handler = {
    onNext: (records: PatternRecord<string>[]) =>
      records.map((r) => {
        if (r.value === 'boom') throw new Error('boom failed');
        return { topic: 'out', key: r.key, value: bytes(`o:${r.value}`) };
      }),
  };
  const c = new Float64Array(COUNTER_SLOTS);
  const d: ProcessorData = { topology: 't', processor: durable('echo'), bus: { kind: 'journal' } };
  const warnings: string[] = [];
  const running = startProcessorPattern(d, bus, handler, c, null, (m) => warnings.push(m));
  try {
    await running.sub.ready;
    const out = await waitForRecords(bus, 'out', 2, 10_000);
    assert.equal(out.map(text), ['o:a', 'o:c']);
    const dead = await waitForRecords(bus, 'dead', 1, 10_000);
    assert.equal(
      dead.map((r) => [r.key, r.headers.error]),
      [['k1', 'boom failed']],
    );
    for (let i = 0; i < 100 && c[Counter.eventsIn] < 3; i++)
      await new Promise((r) => setTimeout(r, 20));
    assert.is(c[Counter.eventsIn], 3);
    assert.is(c[Counter.eventsOut], 3, 'two outputs and the dead letter, committed');
    assert.is(c[Counter.errors], 1, 'the dead letter');
    assert.equal(warnings, []);
  } finally {
    await running.sub.stop();
    await bus.close();
  }
});

test('durable: an output to a topic outside outputs fails the transaction, nothing is written', async () => {
  const bus = await busWith('stray', ['a']);
  const handler: Handler = {
    onNext: (records: PatternRecord<string>[]) =>
      records.map((r) => ({ topic: 'dead', key: r.key, value: bytes('stray') })),
  };
  const c = new Float64Array(COUNTER_SLOTS);
  const p = { ...durable('stray'), deadLetterTopic: undefined, retriesMax: 0 };
  delete p.deadLetterTopic;
  const d: ProcessorData = { topology: 't', processor: p, bus: { kind: 'journal' } };
  const warnings: string[] = [];
  const running = startProcessorPattern(d, bus, handler, c, null, (m) => warnings.push(m));
  try {
    await running.sub.ready;
    for (let i = 0; i < 250 && warnings.length === 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    assert.ok(warnings.length > 0, 'the failed transaction is reported');
    assert.match(
      warnings[0]!,
      /output record to topic "dead", which is not in its outputs \(out\)/,
    );
    assert.equal(await waitForRecords(bus, 'dead', 1, 300), [], 'nothing written');
    assert.equal(await waitForRecords(bus, 'out', 1, 300), []);
  } finally {
    await running.sub.stop({ abandon: true }).catch(() => {});
    await bus.close();
  }
});

test.run();
