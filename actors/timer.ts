/**
 * Timer actor (worker entry): appends a periodic update event (engine/replay EVENT_TYPE_TIMER)
 * to one queue partition every `intervalMs`, so that services read their timer events as an
 * input and a replay sees them at the same place among the other inputs. The next deadline is
 * kept on a fixed grid (start + n * intervalMs), so a slow append does not drift the timer;
 * missed deadlines (a stalled process) yield one event, not a burst. Deadlines are on the
 * monotonic clock (performance.now()), so a wall-clock jump (NTP step, a VM resumed, an
 * operator's `date -s`) neither stalls the timer (a step back) nor bursts it (a step forward);
 * the event's time field is the wall clock's (test/faults-clock.test.ts).
 */
import { runActor, Counter } from '../engine/actor/index.js';
import { openQueueLogs } from '../engine/service/index.js';
import { EnvelopeWriter } from '../engine/codec/index.js';
import { encodeTimer } from '../engine/replay/index.js';
import { TIMER_SHARED, type TimerData } from './contracts.js';

/** Longest single sleep, ms: bounds how late a drain request is seen. */
const SLEEP_MS_MAX = 50;

runActor<TimerData>((ctx) => {
  const d = ctx.data;
  const logs = openQueueLogs(d.bus, () => ctx.heartbeat());
  // Kafka: a plain idempotent producer (transactionalId ''): one tick is one record, so no
  // transaction is needed, and the timer queue's offsets stay contiguous as on the journal.
  const appender = logs.appender(
    { ...d, partition: 0, transactionalId: '' },
    ctx.shared(TIMER_SHARED.notifier),
  );
  const writer = new EnvelopeWriter();
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  try {
    ctx.send({ type: 'ready', info: { nextIndex: appender.nextIndex } });
    ctx.setState('live');
    ctx.send({ type: 'live' });
    let next = performance.now() + d.intervalMs;
    let ticks = 0;
    while (!ctx.draining()) {
      ctx.heartbeat();
      const now = performance.now();
      if (now < next) {
        Atomics.wait(sleeper, 0, 0, Math.min(SLEEP_MS_MAX, next - now));
        continue;
      }
      appender.append(encodeTimer(writer, appender.nextIndex, d.intervalMs, Date.now()));
      appender.flush();
      ticks++;
      ctx.counters[Counter.eventsOut] = ticks;
      next += d.intervalMs;
      if (next <= now) next = now + d.intervalMs;
    }
    ctx.setState('drain');
    return { queue: d.queue, ticks };
  } finally {
    appender.close();
    logs.close();
  }
});
