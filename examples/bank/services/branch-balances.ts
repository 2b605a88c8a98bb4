/**
 * branch-balances: per branch, the running sum of pgbench_history deltas.
 * Input: captured changes of pgbench_history (the bank job captures inserts; updates and deletes
 * are handled too, for a topology that captures them). Output: `{ bid, total }` keyed by bid
 * after every change, so the newest output per branch is the branch's balance as the service
 * sees it; the bank job checks it against pgbench_branches.bbalance. The README's "Writing a
 * service" shows this file from its import on (test/service-example.test.ts checks both).
 */
import { defineService } from 'sluice/service';

interface HistoryRow {
  bid: string;
  delta: string;
}

export default defineService<{ totals: Map<string, number> }>({
  init: () => ({ totals: new Map() }),
  handlers: {
    change(state, event, ctx) {
      const change = event.change(); // table, op, key, before, after (JSON text or null)
      if (change.table !== 'pgbench_history') return;
      // insert: only `after`; delete: only `before`; update: both; truncate: neither.
      const touched = new Set<string>();
      for (const [image, sign] of [
        [change.before, -1],
        [change.after, 1],
      ] as const) {
        if (image === null) continue;
        // Images carry exact text; pgbench deltas are small integers, so Number is exact here.
        const row = JSON.parse(image) as HistoryRow;
        state.totals.set(row.bid, (state.totals.get(row.bid) ?? 0) + sign * Number(row.delta));
        touched.add(row.bid);
      }
      // each output is stamped with this input
      for (const bid of touched) ctx.emit(bid, { bid: Number(bid), total: state.totals.get(bid) });
    },
  },
});
