// Readiness check of kafka.sh: resolves once every listed node answers a Metadata request
// (kafkajs admin.describeCluster through that node's own port) whose broker list holds every
// listed node id. Exits 1 with a reason when a node's process exits or after the timeout.
// With WARM (a 5th argument, 'warm'), it then makes the broker create its group and transaction
// coordinators' topics (__consumer_offsets, __transaction_state) and waits until they answer, so
// the first test's consumer group or transaction does not meet a coordinator still loading.
//   node ready.mjs 127.0.0.1:9092,127.0.0.1:9093 1,2 TIMEOUT_S PID1,PID2 [warm]
import kafkajs from 'kafkajs';

const [brokers, ids, timeoutS, pids, warm] = process.argv.slice(2);
const addrs = brokers.split(',');
const want = ids.split(',').map(Number);
const procs = (pids ?? '').split(',').filter(Boolean).map(Number);
const deadline = Date.now() + Number(timeoutS) * 1000;
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function ready(addr) {
  const kafka = new kafkajs.Kafka({
    clientId: 'sluice-ready',
    brokers: [addr],
    logLevel: kafkajs.logLevel.NOTHING,
    connectionTimeout: 1000,
    requestTimeout: 3000,
    retry: { retries: 0 },
  });
  const admin = kafka.admin();
  try {
    await admin.connect();
    const { brokers: got } = await admin.describeCluster();
    const have = new Set(got.map((b) => b.nodeId));
    return want.every((n) => have.has(n)) ? null : `lists nodes ${[...have].join(',') || 'none'}`;
  } catch (e) {
    return e.message;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/** One transaction committed with a group's offsets in it: both coordinators are up. */
async function warmUp() {
  const kafka = new kafkajs.Kafka({
    clientId: 'sluice-ready',
    brokers: addrs,
    logLevel: kafkajs.logLevel.NOTHING,
    retry: { retries: 30, initialRetryTime: 100, maxRetryTime: 1000 },
  });
  const p = kafka.producer({
    transactionalId: 'sluice-ready',
    maxInFlightRequests: 1,
    idempotent: true,
  });
  for (;;) {
    try {
      await p.connect();
      const t = await p.transaction();
      await t.sendOffsets({ consumerGroupId: 'sluice-ready', topics: [] });
      await t.commit();
      await p.disconnect();
      return;
    } catch (e) {
      if (Date.now() > deadline) {
        console.error(`kafka.sh: coordinators not ready after ${timeoutS} s (${e.message})`);
        process.exit(1);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

let last = '';
for (;;) {
  const dead = procs.findIndex((p) => !alive(p));
  if (dead >= 0) {
    console.error(`kafka.sh: node ${want[dead]} (pid ${procs[dead]}) exited before it was ready`);
    process.exit(1);
  }
  const answers = await Promise.all(addrs.map(ready));
  const bad = answers.findIndex((a) => a !== null);
  if (bad < 0) {
    if (warm === 'warm') await warmUp();
    process.exit(0);
  }
  last = `${addrs[bad]}: ${answers[bad]}`;
  if (Date.now() > deadline) {
    console.error(`kafka.sh: not ready after ${timeoutS} s (${last})`);
    process.exit(1);
  }
  await new Promise((r) => setTimeout(r, 250));
}
