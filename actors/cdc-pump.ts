/**
 * Capture pump actor (worker entry): pump i of N for one capture source. Each cycle claims up to
 * batchSizeMax staged changes whose hash(key) mod N = i, in staging-id order, appends each to
 * partition hash(key) mod P of its target queue (P a multiple of N, so that partition is one of
 * this pump's: p mod N = i; one atomic batch per partition, flushed and fsynced), and only then
 * deletes them from the staging table (MOVEX CDC's claim/ship/ack cycle).
 *
 * Asked to stop now (Command.stop: a runtime change of the pump count, actors/pump-count.ts) it
 * finishes the cycle in flight (append and ack) and exits without draining the backlog, which
 * the next set of pumps ships; asked to drain (the topology stopping) it ships the backlog first.
 *
 * Crash between append and delete: on start the sink reports the staging ids of those of the
 * last batchSizeMax * pumps staged changes of each target partition (read events of initial
 * loads not counted: engine/cdc/journal-sink.ts) that carry the current installation id
 * (engine/cdc/staging.ts); staged rows with those ids are deleted without being appended again,
 * so the queue holds each change once. Records of an earlier installation (the staging table
 * created again, its ids reused) never match.
 *
 * On a kafka bus (PumpData.kafka) the targets are Kafka topics: each cycle's batch is one Kafka
 * transaction of the pump's fixed transactional.id (a refused batch split in halves: one per
 * half, each acked before the next: engine/cdc/pump.ts point 3), and the start reconciles
 * against the pump's last committed transaction (engine/cdc/kafka-sink.ts). On the journal
 * bus, targets that are processor topics are shipped the same way into the bus (PumpData.kafka
 * without a connection: the bus is served to this worker over the port PUMP_PORTS.bus).
 *
 * Per table, the changes made durable in the target are added to the source's shipped counters
 * (PUMP_SHARED.shipped, shared by all its pumps), which the statistics read (ops/stats.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { addShipped, PUMP_PORTS, PUMP_SHARED, type PumpData } from './contracts.js';
import { runActor, Counter } from '../engine/actor/index.js';
import { ChangeRecordWriter } from '../engine/codec/index.js';
import {
  openStaging,
  PumpCore,
  SinkFailures,
  CDC_DEFAULTS,
  JournalPumpSink,
  KafkaPumpSink,
  buildChangeRecord,
  encodeCaptureJson,
  jsonSourceInfo,
  type StagedChange,
  type StagingClient,
} from '../engine/cdc/index.js';
import type { BusBackend } from '../engine/bus/index.js';
import { kafkaOptionsOf } from './kafka-capture.js';

runActor<PumpData>(async (ctx) => {
  const d = ctx.data;
  const c = ctx.counters;
  // Slot of each table in the source's shipped counters (actors/contracts.ts).
  const shippedSab = ctx.shared(PUMP_SHARED.shipped);
  const slotOf = new Map(d.source.tables.map((t, i) => [t.table, i]));
  const onDurable = (changes: readonly StagedChange[]) => {
    // One Atomics.add per table per batch.
    const perSlot = new Map<number, number>();
    for (const ch of changes) {
      const slot = slotOf.get(ch.table);
      if (slot !== undefined) perSlot.set(slot, (perSlot.get(slot) ?? 0) + 1);
    }
    for (const [slot, n] of perSlot) addShipped(shippedSab, slot, n);
  };
  const recordBytesMax = d.source.recordBytesMax ?? CDC_DEFAULTS.recordBytesMax;
  // Into Kafka each change is encoded into this writer's reused buffer, then copied once.
  const writer = new ChangeRecordWriter();
  /** An owned copy of the record (Kafka keeps the value after the call). */
  const envelopeOf = (ch: StagedChange, inst: string): Uint8Array => {
    buildChangeRecord(writer, ch, inst);
    return new Uint8Array(writer.bytes());
  };
  // Into bus topics each batch is one bus transaction (engine/cdc/kafka-sink.ts): on a kafka
  // bus a Kafka transaction; on the journal bus (targets that are processor topics) one atomic
  // commit of the bus served to this worker over its port.
  let kafkaBus: BusBackend | null = null;
  let kafkaSink: KafkaPumpSink | null = null;
  if (d.kafka) {
    const k = d.kafka;
    const info = jsonSourceInfo(d.source);
    if (k.connection) {
      // Loaded only here: a pump on the journal does not load kafkajs.
      const { createKafkaBus } = await import('../engine/bus/index.js');
      kafkaBus = createKafkaBus(kafkaOptionsOf(k.connection));
    } else {
      const { connectBus } = await import('../engine/bus/remote/index.js');
      kafkaBus = connectBus(ctx.port(PUMP_PORTS.bus), 'journal');
    }
    kafkaSink = new KafkaPumpSink({
      bus: kafkaBus,
      source: d.source.name,
      pump: d.pump,
      transactionalId: k.transactionalId,
      topics: [...new Set(Object.values(d.tableTargets))],
      recordBytesMax: Math.min(recordBytesMax, k.busRecordBytesMax),
      encode(ch, inst) {
        const topic = d.tableTargets[ch.table];
        if (!topic)
          throw new Error(
            `pump ${ctx.name}: staged change ${ch.stagingId} is for table "${ch.table}", which has no target in the topology`,
          );
        return {
          topic,
          value:
            k.formats[ch.table] === 'json'
              ? encodeCaptureJson(ch, info, inst)
              : envelopeOf(ch, inst),
        };
      },
      onCommitted(records) {
        c[Counter.eventsOut] += records;
      },
    });
  }
  // Into journal queues (engine/cdc/journal-sink.ts): appenders opened by up(), closed after
  // any failure and at the end.
  const journal = new JournalPumpSink({
    source: d.source.name,
    actor: ctx.name,
    pump: d.pump,
    pumps: d.source.pumps,
    targets: d.targets,
    tableTargets: d.tableTargets,
    recordBytesMax,
    notifierOf: (queue, p) => ctx.shared(PUMP_SHARED.notifier(queue, p)),
    onAppended: (n) => (c[Counter.eventsOut] += n),
  });
  // Where an outage is: a failure of the sink's calls (or of opening its journal appenders) is
  // the target's, any other the capture source's (engine/cdc/pump.ts SinkFailures), so the log
  // line and the health name what does not answer, never by reading the error's text.
  const failures = new SinkFailures();
  const sourceName = `capture source "${d.source.name}"`;
  const targetName = `${targetOf(d)} (target of ${sourceName})`;
  const sink = failures.watch(kafkaSink ?? journal);
  // Outages (issue item 8): the database or the target failing is waited out, never a reason to
  // exit: the pump reconnects with capped exponential backoff, forever, and a fresh PumpCore's
  // start() reconciles against the sink, so a batch appended before the failure is not appended
  // again. Only a drain stops the retrying.
  // `what`: the source's or the target's name, as the last failure said ('' while up).
  const outage = { sinceMs: 0, attempts: 0, what: '' };
  const whatOf = (err: unknown) => (failures.isTarget(err) ? targetName : sourceName);
  let staging: StagingClient | null = null;
  let core: PumpCore | null = null;
  let recovered = 0;
  let warnedNoInstallation = false;
  const closeStaging = async () => {
    const s = staging;
    staging = null;
    core = null;
    if (s) await s.close().catch(() => undefined);
  };
  const down = async (err: unknown) => {
    await closeStaging();
    journal.close();
    const what = whatOf(err);
    const error = String((err as Error).message ?? err);
    // Sent before the counter is set, so the health finds it with the counter (ops/health.ts).
    if (outage.what !== what) {
      outage.what = what;
      ctx.send({
        type: 'outage',
        outage: { side: failures.isTarget(err) ? 'target' : 'source', what, error },
      });
    }
    if (outage.sinceMs === 0) {
      outage.sinceMs = Date.now();
      c[Counter.downSinceMs] = outage.sinceMs;
      ctx.log(
        'warn',
        `${what} is down since ${new Date(outage.sinceMs).toISOString()}: ${error}; retrying`,
      );
    }
    c[Counter.errors]++;
    const delayMs = Math.min(
      CDC_DEFAULTS.outageBackoffInitialMs * 2 ** outage.attempts,
      CDC_DEFAULTS.outageBackoffMaxMs,
    );
    outage.attempts++;
    for (let waitedMs = 0; waitedMs < delayMs && !ctx.draining(); waitedMs += 50) {
      ctx.heartbeat();
      await sleep(Math.min(50, delayMs - waitedMs));
    }
  };
  const up = async (): Promise<PumpCore> => {
    for (;;) {
      try {
        try {
          journal.open();
        } catch (err) {
          throw failures.mark(err);
        }
        staging = await openStaging(d.source);
        const fresh = new PumpCore({
          staging,
          pump: d.pump,
          pumps: d.source.pumps,
          batchSizeMax: d.source.batchSizeMax,
          sink,
          onDurable,
        });
        const reconciled = await fresh.start();
        recovered += reconciled;
        if (fresh.installationId === '' && !warnedNoInstallation) {
          warnedNoInstallation = true;
          ctx.log(
            'warn',
            `capture source "${d.source.name}" has no installation id (installed by an older version): crash reconciliation is off, a batch shipped just before a crash is shipped again; run \`sluice install\` to set one`,
          );
        }
        if (reconciled > 0)
          ctx.log(
            'info',
            `deleted ${reconciled} staged change${reconciled === 1 ? '' : 's'} the target already held (shipped before a crash, not yet deleted)`,
          );
        core = fresh;
        if (outage.sinceMs !== 0) {
          ctx.log(
            'info',
            `${outage.what} is up again after ${((Date.now() - outage.sinceMs) / 1000).toFixed(1)} s down`,
          );
          ctx.send({ type: 'outage', outage: null });
        }
        outage.sinceMs = 0;
        outage.attempts = 0;
        outage.what = '';
        c[Counter.downSinceMs] = 0;
        return fresh;
      } catch (err) {
        await down(err);
        if (ctx.draining())
          throw new Error(`${whatOf(err)} is down while draining: ${(err as Error).message}`);
      }
    }
  };
  ctx.send({ type: 'ready', info: {} });
  ctx.setState('live');
  ctx.send({ type: 'live' });
  try {
    for (;;) {
      ctx.heartbeat();
      const pump = core ?? (await up());
      let n: number;
      const before = pump.stats.refusals;
      try {
        n = await pump.runCycle();
      } catch (err) {
        await down(err);
        if (ctx.draining())
          throw new Error(`${whatOf(err)} is down while draining: ${(err as Error).message}`);
        continue;
      }
      c[Counter.errors] += pump.stats.refusals - before;
      if (n > 0) {
        c[Counter.eventsIn] += n;
        c[Counter.batches]++;
      }
      // Stop now: the cycle is acked; what is still staged is the next pumps' (a new count).
      if (ctx.stopping()) break;
      if (n > 0) continue;
      // Drain: stop once a cycle finds nothing left for this pump.
      if (ctx.draining()) break;
      c[Counter.waits]++;
      await sleep(d.source.pollIntervalMs);
    }
    ctx.setState('drain');
    return { pump: d.pump, shipped: c[Counter.eventsIn], recovered };
  } finally {
    await closeStaging();
    journal.close();
    await kafkaSink?.close();
    await kafkaBus?.close().catch(() => undefined);
  }
});

/**
 * What a pump ships into, as its outage lines name it: the Kafka brokers and topics of a kafka
 * bus, the bus topics of the journal bus (processor topics), or the journal queues.
 */
function targetOf(d: PumpData): string {
  const targets = [...new Set(Object.values(d.tableTargets))];
  const names = (one: string) => `${one}${targets.length === 1 ? '' : 's'} ${targets.join(', ')}`;
  if (d.kafka?.connection) return `Kafka ${d.kafka.connection.brokers.join(',')} ${names('topic')}`;
  if (d.kafka) return `bus ${names('topic')}`;
  return `journal ${names('queue')}`;
}
