/**
 * Kafka transactions back to back, as a capture pump or a service output writes them: per
 * transaction one send of `--records` 300-byte records over 4 partitions, sendOffsets (as the
 * pump sink does) and commit. Two producer retry settings in the same run, rounds alternating
 * which goes first: the default (KAFKA_PRODUCER_RETRY, first wait 20 ms) and the earlier one
 * (first wait 100 ms). The difference is the wait kafkajs makes when a transaction's first send
 * gets CONCURRENT_TRANSACTIONS from AddPartitionsToTxn because the previous commit's markers are
 * not all written yet (see engine/bus/kafka/index.ts KAFKA_PRODUCER_RETRY).
 *   node dist/bench/kafka-txn.js [--brokers host:port] [--records 50] [--txns 40] [--rounds 4]
 * Without --brokers (or SLUICE_KAFKA_BROKERS) a private broker is started.
 */
import os from 'node:os';
import {
  createKafkaBus,
  KAFKA_PRODUCER_RETRY,
  type KafkaRetryOptions,
} from '../engine/bus/index.js';
import { startKafka } from '../testing/kafka-broker.js';

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
}

const RECORDS = arg('records', 50);
const TXNS = arg('txns', 40);
const ROUNDS = arg('rounds', 4);
const EARLIER: KafkaRetryOptions = { retries: 12, initialRetryTime: 100, maxRetryTime: 3200 };

/** Milliseconds per transaction (mean) and per phase of `txns` transactions. */
async function round(
  brokers: string[],
  retry: KafkaRetryOptions,
  tag: string,
): Promise<{ txnMs: number; sendMs: number; offsetsMs: number; commitMs: number }> {
  const bus = createKafkaBus({ brokers, clientId: `kafka-txn-${tag}`, producerRetry: retry });
  const topic = `kafka-txn-bench-${tag}-${process.pid}-${Date.now()}`;
  try {
    await bus.createTopics([{ name: topic, partitions: 4 }]);
    const p = await bus.producer({ transactionalId: topic });
    const value = new Uint8Array(300);
    const records = Array.from({ length: RECORDS }, (_, j) => ({
      topic,
      partition: j % 4,
      key: null,
      value,
    }));
    let send = 0;
    let offsets = 0;
    let commit = 0;
    // One untimed transaction: connections, coordinator lookup, InitProducerId.
    for (let i = -1; i < TXNS; i++) {
      const t0 = performance.now();
      const txn = await p.begin();
      const meta = await txn.send(records);
      const t1 = performance.now();
      await txn.sendOffsets(topic, [{ topic, partition: 0, offset: meta[0]!.offset }]);
      const t2 = performance.now();
      await txn.commit();
      const t3 = performance.now();
      if (i < 0) continue;
      send += t1 - t0;
      offsets += t2 - t1;
      commit += t3 - t2;
    }
    await p.close();
    return {
      txnMs: (send + offsets + commit) / TXNS,
      sendMs: send / TXNS,
      offsetsMs: offsets / TXNS,
      commitMs: commit / TXNS,
    };
  } finally {
    await bus.close();
  }
}

const envBrokers = process.env.SLUICE_KAFKA_BROKERS?.split(',');
const i = process.argv.indexOf('--brokers');
let brokers = i >= 0 ? process.argv[i + 1]!.split(',') : envBrokers;
let stop: (() => Promise<void>) | null = null;
if (!brokers) {
  const k = await startKafka();
  brokers = k.brokers;
  stop = () => k.stop({ kill: true });
}
const sides = [
  {
    name: `default (first wait ${KAFKA_PRODUCER_RETRY.initialRetryTime} ms)`,
    retry: KAFKA_PRODUCER_RETRY,
  },
  { name: `earlier (first wait ${EARLIER.initialRetryTime} ms)`, retry: EARLIER },
];
const sums = sides.map(() => ({ txnMs: 0, sendMs: 0, offsetsMs: 0, commitMs: 0 }));
const perRound: string[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? [0, 1] : [1, 0];
  const got: number[] = [];
  for (const s of order) {
    const m = await round(brokers, sides[s]!.retry, `${r}-${s}`);
    for (const k of Object.keys(m) as (keyof typeof m)[]) sums[s]![k] += m[k] / ROUNDS;
    got[s] = m.txnMs;
  }
  perRound.push(`${(got[1]! / got[0]!).toFixed(2)}x`);
}
const load = os.loadavg()[0]!.toFixed(1);
console.log(
  `### Kafka transactions back to back: ${RECORDS} records of 300 B per transaction (send, sendOffsets, commit), ${TXNS} per round, ${ROUNDS} rounds\n`,
);
console.log(
  `${os.cpus().length} CPUs, Node ${process.version}; 1-minute load average ${load} at the end\n`,
);
console.log(
  '| producer retry | ms per transaction | send (incl. AddPartitionsToTxn) | sendOffsets | commit | transactions/s |',
);
console.log('|---|---:|---:|---:|---:|---:|');
sides.forEach((s, n) => {
  const m = sums[n]!;
  console.log(
    `| ${s.name} | ${m.txnMs.toFixed(1)} | ${m.sendMs.toFixed(1)} | ${m.offsetsMs.toFixed(1)} | ${m.commitMs.toFixed(1)} | ${(1000 / m.txnMs).toFixed(0)} |`,
  );
});
console.log(
  `\nearlier / default, ms per transaction: ${(sums[1]!.txnMs / sums[0]!.txnMs).toFixed(2)}x (per round: ${perRound.join(', ')})`,
);
await stop?.();
