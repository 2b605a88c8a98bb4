/**
 * The processor host: one message pattern of engine/patterns, with the handler module of a
 * topology's `processors[]` entry, on the topology's bus (actors/processor.ts is its worker
 * entry). The pattern runs unchanged, as it does as a library: it owns its consumer group
 * membership, positions and transactions (outputs and consumed positions commit in one
 * transaction; state-and-event loads a partition's states before its first event).
 *
 * Steps: 1. connect the bus (journal: the port to the thread that owns the topology's journal
 * bus; kafka: the brokers, with the bus's TLS and SASL); 2. import the module, build the
 * handler; 3. start the pattern (./patterns.ts) and wait until it is ready (a missing topic fails
 * the start: the supervisor restarts the group with backoff); 4. live: copy the pattern's counts
 * into the shared counters every COUNTERS_MS; a pattern that ends by itself (retries exhausted,
 * fenced) fails the actor; 5. drain: stop the pattern after its current batch, close the bus
 * connection. A durable transaction that fails (and is retried from the committed position)
 * counts in `errors` and sends a `warn` log line to the supervisor. Test-only commit faults:
 * ./faults.ts.
 *
 * With `pool: { threads }` (durable, pubsub) the pattern still runs here, and only the handler
 * calls go to a piscina pool running the same module (./pool-stage.ts); the outputs come back in
 * input order and commit here, in the pattern's transaction, as inline. A handler's errors follow
 * ./records.ts on both paths (with a deadLetterTopic: retried alone, then dead-lettered;
 * without: the batch fails).
 */
import { Counter, type ActorContext } from '../actor/index.js';
import { connectBus, createKafkaBus, kafkaBusOptionsOf, type BusBackend } from '../bus/index.js';
import { PROCESSOR_PORTS, type ProcessorData, type ProcessorSummary } from './contract.js';
import { loadHandler } from './handler.js';
import { outputLimitOf, startProcessorPattern, type RunningPattern } from './patterns.js';
import { startPoolStage, type PoolStage } from './pool-stage.js';

/** How often the pattern's counts are copied into the shared counters, ms (bounds drain latency too). */
const COUNTERS_MS = 50;

/**
 * Runs the processor of `ctx` (start data ProcessorData; on the journal bus the port
 * PROCESSOR_PORTS.bus) until the supervisor drains it; returns its summary. Sends `ready` once
 * the pattern is ready, then `live`. `poolWorkerFile`: the piscina entry of its pool threads
 * (actors/pool-worker.ts), used with `pool:`.
 * @throws the pattern's error when it ends by itself (retries exhausted, fenced), or an Error
 *   saying it ended; the handler module's load error; the bus's connection error.
 */
export async function runProcessorHost(
  ctx: ActorContext<ProcessorData>,
  poolWorkerFile: string,
): Promise<ProcessorSummary> {
  const d = ctx.data;
  const p = d.processor;
  const bus: BusBackend =
    d.bus.kind === 'kafka'
      ? createKafkaBus(kafkaBusOptionsOf(d.bus, p.name))
      : connectBus(ctx.port(PROCESSOR_PORTS.bus), 'journal');
  const c = ctx.counters;
  let running: RunningPattern | null = null;
  let stage: PoolStage | null = null;
  try {
    const handler = await loadHandler(p.module, {
      name: p.name,
      pattern: p.pattern,
      inputs: [...p.inputs],
      outputs: [...p.outputs],
      ...(p.stateTopic !== undefined ? { stateTopic: p.stateTopic } : {}),
      settings: p.settings,
      bus,
    });
    // Before the pattern starts: its first poll's records go straight to the pool.
    if (p.pool !== undefined)
      stage = startPoolStage({ ...p, pool: p.pool }, outputLimitOf(d), poolWorkerFile);
    running = startProcessorPattern(d, bus, handler, c, stage, (msg, fields) =>
      ctx.log('warn', msg, fields),
    );
    const { sub } = running;
    let ended: { error: unknown } | null = null;
    sub.done.then(
      () => (ended ??= { error: null }),
      (e: unknown) => (ended ??= { error: e }),
    );
    await sub.ready;
    ctx.send({ type: 'ready', info: { processor: p.name, pattern: p.pattern } });
    ctx.setState('live');
    ctx.send({ type: 'live' });
    while (!ctx.draining() && ended === null) {
      ctx.heartbeat();
      running.count();
      await new Promise((r) => setTimeout(r, COUNTERS_MS));
    }
    if (ended !== null) {
      const e = (ended as { error: unknown }).error;
      throw e ?? new Error(`processor ${p.name}: the ${p.pattern} pattern ended by itself`);
    }
    ctx.setState('drain');
    await sub.stop();
    await stage?.close();
    running.count();
    const summary: ProcessorSummary = {
      processor: p.name,
      pattern: p.pattern,
      eventsIn: c[Counter.eventsIn],
      eventsOut: c[Counter.eventsOut],
      errors: c[Counter.errors],
    };
    return summary;
  } finally {
    await running?.sub.stop({ abandon: true }).catch(() => {});
    await stage?.close().catch(() => {});
    await bus.close().catch(() => {});
  }
}
