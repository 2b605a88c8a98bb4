/**
 * The pattern conformance suite on the journal backend; the crash test kills a child process
 * (kill -9). Then what only a backend whose commits wait for a sync shows: the durable pattern's
 * group commit (batches polled while a commit syncs join the next transaction).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { createJournalBus } from '../engine/bus/index.js';
import { bytesCodec, startDurable, stringCodec } from '../engine/patterns/index.js';
import { patternConformance } from './patterns-conformance.js';
import { bytes, echoProcessor, text, waitForRecords } from './patterns-helpers.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-patterns-journal-'));
let n = 0;

patternConformance('journal', async () => {
  const dir = path.join(root, `bus-${++n}`);
  return {
    bus: await createJournalBus({ dir, fsync: 'none' }),
    reopen: () => createJournalBus({ dir, fsync: 'none' }),
    crashChild: { kind: 'journal', dir },
  };
});

// Every pattern again with every record read back from the segment files (2 offsets in memory)
// and a checkpoint (transaction-log truncation) after every commit.
const cold = { fsync: 'none', hotRecordsMax: 2, hotBytesMax: 1, checkpointBytes: 1 } as const;
patternConformance('journal, cold reads', async () => {
  const dir = path.join(root, `bus-${++n}`);
  return {
    bus: await createJournalBus({ dir, ...cold }),
    reopen: () => createJournalBus({ dir, ...cold }),
    crashChild: { kind: 'journal', dir },
  };
});

const s = suite('durable on the journal: group commit');
const INPUTS = 2000;

/** 2000 inputs on one partition, a durable subscription (fsync 'batch': commits wait for a real sync). */
async function run(
  failAtTransaction: number | null,
): Promise<{ sizes: number[]; failed: number; outputs: string[] }> {
  const bus = await createJournalBus({ dir: path.join(root, `group-${++n}`), fsync: 'batch' });
  try {
    await bus.createTopics([
      { name: 'in', partitions: 1 },
      { name: 'out', partitions: 1 },
    ]);
    const p = await bus.producer();
    await p.send(
      Array.from({ length: INPUTS }, (_, i) => ({
        topic: 'in',
        key: `k${i % 7}`,
        value: bytes(`v${i}`),
      })),
    );
    await p.close();
    const sizes: number[] = [];
    const sub = startDurable({
      bus,
      groupId: 'g',
      topics: ['in'],
      transactionalId: 'tx',
      codec: stringCodec,
      processor: echoProcessor('out'),
      batchSizeMax: 10,
      commitRecordsMax: 50,
      faults: {
        beforeCommit: (records) => {
          sizes.push(records.length);
          if (sizes.length === failAtTransaction) throw new Error('injected commit failure');
        },
      },
    });
    const got = await waitForRecords(bus, 'out', INPUTS);
    await sub.stop();
    return { sizes, failed: sub.stats.batchesFailed, outputs: got.map(text) };
  } finally {
    await bus.close();
  }
}

const inOrder = Array.from({ length: INPUTS }, (_, i) => `o:v${i}`);

s(
  'batches polled while a commit syncs are committed together, at most commitRecordsMax inputs per transaction; each output once, in order',
  async () => {
    const r = await run(null);
    assert.equal(r.outputs, inOrder);
    assert.ok(Math.max(...r.sizes) <= 50, `largest transaction ${Math.max(...r.sizes)} inputs`);
    assert.ok(
      r.sizes.some((x) => x > 10),
      `some transaction holds more than one poll of 10 (sizes ${r.sizes.slice(0, 20).join(',')}...)`,
    );
    assert.ok(
      r.sizes.length < INPUTS / 10,
      `${r.sizes.length} transactions for ${INPUTS / 10} polls`,
    );
  },
);

s(
  'a failed group commit drops all its batches and the ones prepared meanwhile; after the rewind each output appears once, in order',
  async () => {
    const r = await run(3);
    assert.is(r.failed, 1);
    assert.ok(r.sizes[2] > 10, `the failed transaction held several polls (${r.sizes[2]} inputs)`);
    assert.equal(r.outputs, inOrder);
  },
);

s(
  'bytesCodec: the processor gets each consumed record (topic, partition, offset, key, raw value); forwarded values are committed once, in order, also after a failed commit and a reopen',
  async () => {
    const dir = path.join(root, `bytes-${++n}`);
    let bus = await createJournalBus({ dir, fsync: 'batch' });
    const seen: string[] = [];
    try {
      await bus.createTopics([
        { name: 'in', partitions: 1 },
        { name: 'out', partitions: 1 },
      ]);
      const p = await bus.producer();
      await p.send(
        Array.from({ length: 100 }, (_, i) => ({
          topic: 'in',
          key: `k${i % 7}`,
          value: bytes(`v${i}`),
        })),
      );
      await p.close();
      let transactions = 0;
      const sub = startDurable({
        bus,
        groupId: 'g',
        topics: ['in'],
        transactionalId: 'tx',
        codec: bytesCodec,
        batchSizeMax: 10,
        processor: {
          onNext: (records) =>
            records.map((r) => {
              seen.push(
                `${r.topic}/${r.partition}@${r.offset} ${r.key}=${text({ value: r.value })}`,
              );
              return { topic: 'out', key: r.key, value: r.value };
            }),
        },
        faults: {
          beforeCommit: () => {
            if (++transactions === 2) throw new Error('injected commit failure');
          },
        },
      });
      await waitForRecords(bus, 'out', 100);
      await sub.stop();
      assert.is(sub.stats.batchesFailed, 1);
      await bus.close();
      bus = await createJournalBus({ dir, fsync: 'batch' });
      const got = await waitForRecords(bus, 'out', 100);
      assert.equal(
        got.map((r) => `${r.key}=${text(r)}`),
        Array.from({ length: 100 }, (_, i) => `k${i % 7}=v${i}`),
      );
      assert.ok(
        seen.includes('in/0@0 k0=v0') && seen.includes('in/0@99 k1=v99'),
        `processor saw consumed records: ${seen.slice(0, 3).join(', ')}`,
      );
    } finally {
      await bus.close();
    }
  },
);

s.after(() => fs.rmSync(root, { recursive: true, force: true }));
s.run();
