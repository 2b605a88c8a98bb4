/**
 * positions on the idempotent key-value store: each trade puts the instrument's `[qty, cost]`
 * and the trade count (`trades`); each periodic update event puts the tick count (`ticks`) and
 * writes the next batch of the store's snapshot cycle. The output is the store's change log; a
 * restart rebuilds the store from the newest complete snapshot cycle, whatever the history.
 */
import { defineService } from 'sluice/service';

export default defineService<Record<string, never>>({
  init: () => ({}),
  kvStore: { snapshotBatchSize: 1000 },
  handlers: {
    json(_state, event, ctx) {
      const t = event.json<{ instrument: string; qty: number; price: number }>();
      const p = ctx.kv.get<[number, number]>(t.instrument) ?? [0, 0];
      ctx.kv.put(t.instrument, [p[0] + t.qty, p[1] + t.qty * t.price]);
      ctx.kv.put('trades', (ctx.kv.get<number>('trades') ?? 0) + 1);
    },
  },
  onTimer(_state, _event, ctx) {
    ctx.kv.put('ticks', (ctx.kv.get<number>('ticks') ?? 0) + 1);
  },
});
