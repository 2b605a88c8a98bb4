import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { createMemoryBus, type BusBackend, type ConsumedRecord } from '../engine/bus/index.js';
import { busConformance } from './bus-conformance.js';

busConformance('memory', async () => createMemoryBus());

const values = suite('memory bus: stored values');

/** Every record of `topic` partition 0, read with a fresh consumer. */
async function readAll(bus: BusBackend, topic: string): Promise<ConsumedRecord[]> {
  const c = await bus.consumer();
  await c.assign([{ topic, partition: 0 }]);
  const out: ConsumedRecord[] = [];
  for (
    let got = await c.poll({ timeoutMs: 50 });
    got.length > 0;
    got = await c.poll({ timeoutMs: 50 })
  )
    out.push(...got);
  await c.close();
  return out;
}

values('a sent buffer is copied: the caller reusing it changes no stored record', async () => {
  const bus = createMemoryBus();
  await bus.createTopics([{ name: 'in', partitions: 1 }]);
  const p = await bus.producer();
  const buf = new Uint8Array([1, 2, 3]);
  await p.send([{ topic: 'in', key: 'a', value: buf }]);
  buf.fill(9);
  await p.send([{ topic: 'in', key: 'b', value: buf }]);
  const got = await readAll(bus, 'in');
  assert.equal(
    got.map((r) => [...r.value!]),
    [
      [1, 2, 3],
      [9, 9, 9],
    ],
  );
  await bus.close();
});

values(
  'a consumed value sent again (in a transaction) is stored as the same read-only bytes, not a copy',
  async () => {
    const bus = createMemoryBus();
    await bus.createTopics([
      { name: 'in', partitions: 1 },
      { name: 'out', partitions: 1 },
    ]);
    const p = await bus.producer();
    await p.send([{ topic: 'in', key: 'a', value: new Uint8Array([4, 5, 6]) }]);
    const [input] = await readAll(bus, 'in');
    const t = await bus.producer({ transactionalId: 'fwd' });
    const txn = await t.begin();
    await txn.send([{ topic: 'out', key: input.key, value: input.value, headers: input.headers }]);
    await txn.commit();
    const [output] = await readAll(bus, 'out');
    assert.equal([...output.value!], [4, 5, 6]);
    assert.is(output.value!.buffer, input.value!.buffer);
    assert.is(output.value!.byteOffset, input.value!.byteOffset);
    assert.equal(output.headers, {});
    await bus.close();
  },
);

values.run();
