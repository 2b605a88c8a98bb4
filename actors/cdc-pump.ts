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
 * last batchSizeMax records of each target partition that carry the current installation id
 * (engine/cdc/staging.ts); staged rows with those ids are deleted without being appended again,
 * so the queue holds each change once. Records of an earlier installation (the staging table
 * created again, its ids reused) never match.
 *
 * On a kafka bus (PumpData.kafka) the targets are Kafka topics: each cycle's batch is one Kafka
 * transaction of the pump's fixed transactional.id, and the start reconciles against the
 * pump's last committed transaction (engine/cdc/kafka-sink.ts). On the journal bus, targets
 * that are processor topics are shipped the same way into the bus (PumpData.kafka without a
 * connection: the bus is served to this worker over the port PUMP_PORTS.bus).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { PUMP_PORTS, PUMP_SHARED, type PumpData } from './contracts.js';
import { runActor, Counter } from '../engine/actor/index.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  decodeChange,
  encodeChange,
  EVENT_TYPE_CHANGE,
} from '../engine/codec/index.js';
import {
  openStaging,
  PumpCore,
  RecordRefusedError,
  CDC_DEFAULTS,
  KafkaPumpSink,
  encodeCaptureJson,
  jsonSourceInfo,
  type StagedChange,
  type PumpSink,
  type StagingClient,
} from '../engine/cdc/index.js';
import type { BusBackend } from '../engine/bus/index.js';
import { kafkaOptionsOf } from './kafka-capture.js';

runActor<PumpData>(async (ctx) => {
  const d = ctx.data;
  const c = ctx.counters;
  // Opened on first use and closed after any failure: an appender whose write or fsync failed
  // (ENOSPC, EIO) still buffers the failed frames and may have left a partial frame in its
  // segment; only a reopen (recovery cuts the torn tail) makes the next append land right.
  // `${queue}/${partition}` -> its appender.
  const appenders = new Map<string, Appender>();
  const openAppenders = () => {
    for (const [queue, t] of Object.entries(d.targets)) {
      for (const [p, dir] of Object.entries(t.dirs)) {
        const k = `${queue}/${p}`;
        if (appenders.has(k)) continue;
        appenders.set(
          k,
          Appender.open({
            dir,
            segmentBytes: t.segmentBytes,
            fsync: t.fsync,
            notifier: ctx.shared(PUMP_SHARED.notifier(queue, Number(p))),
          }),
        );
      }
    }
  };
  const closeAppenders = () => {
    for (const a of appenders.values()) {
      try {
        a.close();
      } catch {
        // a failed appender may fail to close too; its lock and descriptors die with it
      }
    }
    appenders.clear();
  };
  const writer = new EnvelopeWriter();
  const recordBytesMax = d.source.recordBytesMax ?? CDC_DEFAULTS.recordBytesMax;
  // The installation id of the staging this pump ships from: given to the sink by each start's
  // reconciliation (PumpSink.recentStagingIds), stamped on every record after it.
  let installation = '';
  const envelopeOf = (ch: StagedChange, inst: string): Uint8Array =>
    writer.encode({
      type: EVENT_TYPE_CHANGE,
      key: ch.key,
      eventTimeMs: ch.timeMs,
      causeQueue: 0,
      causePartition: 0,
      causeIndex: -1,
      payload: encodeChange({
        stagingId: ch.stagingId,
        table: ch.table,
        op: ch.op,
        key: ch.key,
        before: ch.before,
        after: ch.after,
        txid: ch.txid,
        commitTimeMs: ch.timeMs,
        installation: inst,
      }),
    });
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
      recordBytesMax,
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
  const sink: PumpSink = kafkaSink ?? {
    appendBatch(changes: StagedChange[]) {
      // Every record is encoded and checked before any is appended: a refusal appends nothing.
      const byPartition = new Map<string, Uint8Array[]>();
      for (const ch of changes) {
        const queue = d.tableTargets[ch.table];
        if (!queue)
          throw new Error(
            `pump ${ctx.name}: staged change ${ch.stagingId} is for table "${ch.table}", which has no target in the topology`,
          );
        const target = d.targets[queue]!;
        // The staged key hash (what claim() split the pumps by), so the partition is this pump's.
        const k = `${queue}/${ch.keyHash % target.partitions}`;
        let list = byPartition.get(k);
        if (!list) byPartition.set(k, (list = []));
        const record = envelopeOf(ch, installation);
        if (record.length > recordBytesMax) {
          const many = changes.length > 1 ? ` (in a batch of ${changes.length})` : '';
          throw new RecordRefusedError(
            `record of ${record.length} bytes exceeds recordBytesMax ${recordBytesMax} of capture source "${d.source.name}" (target queue "${queue}")${many}`,
          );
        }
        list.push(record);
      }
      for (const [k, list] of byPartition) {
        const a = appenders.get(k);
        if (!a)
          throw new Error(
            `pump ${ctx.name}: claimed a change for ${k}, a partition this pump does not append (pump ${d.pump} of ${d.source.pumps})`,
          );
        a.appendBatch(list);
        a.flush();
      }
      c[Counter.eventsOut] += changes.length;
    },
    recentStagingIds(limit: number, installationId: string) {
      installation = installationId;
      const ids = new Set<string>();
      const view = new EnvelopeView();
      for (const dir of Object.values(d.targets).flatMap((t) => Object.values(t.dirs))) {
        const tailer = Tailer.open({ dir });
        try {
          tailer.moveToEnd();
          for (let i = 0; i < limit; i++) {
            const rec = tailer.previous();
            if (!rec) break;
            view.wrap(rec.bytes, 0, rec.bytes.length);
            if (view.type !== EVENT_TYPE_CHANGE) continue;
            // Only this installation's records: a recreated staging table reuses staging ids.
            const ch = decodeChange(view.payload);
            if (installationId !== '' && ch.installation === installationId) ids.add(ch.stagingId);
          }
        } finally {
          tailer.close();
        }
      }
      return ids;
    },
  };
  // Outages (issue item 8): the database or the target failing is waited out, never a reason to
  // exit: the pump reconnects with capped exponential backoff, forever, and a fresh PumpCore's
  // start() reconciles against the sink, so a batch appended before the failure is not appended
  // again. Only a drain stops the retrying.
  const outage = { sinceMs: 0, attempts: 0 };
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
    closeAppenders();
    if (outage.sinceMs === 0) {
      outage.sinceMs = Date.now();
      c[Counter.downSinceMs] = outage.sinceMs;
      ctx.log(
        'warn',
        `capture source "${d.source.name}" is down since ${new Date(outage.sinceMs).toISOString()}: ${(err as Error).message ?? err}; retrying`,
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
        openAppenders();
        staging = await openStaging(d.source);
        const fresh = new PumpCore({
          staging,
          pump: d.pump,
          pumps: d.source.pumps,
          batchSizeMax: d.source.batchSizeMax,
          sink,
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
            `capture source "${d.source.name}" is up again after ${((Date.now() - outage.sinceMs) / 1000).toFixed(1)} s down`,
          );
        }
        outage.sinceMs = 0;
        outage.attempts = 0;
        c[Counter.downSinceMs] = 0;
        return fresh;
      } catch (err) {
        await down(err);
        if (ctx.draining())
          throw new Error(
            `capture source "${d.source.name}" is down while draining: ${(err as Error).message}`,
          );
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
          throw new Error(
            `capture source "${d.source.name}" is down while draining: ${(err as Error).message}`,
          );
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
    closeAppenders();
    await kafkaSink?.close();
    await kafkaBus?.close().catch(() => undefined);
  }
});
