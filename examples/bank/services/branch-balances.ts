/**
 * branch-balances: per branch, the running sum of pgbench_history deltas.
 * Input: captured inserts into pgbench_history. Output: `{ bid, total }` keyed by bid after every
 * insert, so the newest output per branch is the branch's balance as the service sees it; the
 * bank job checks it against pgbench_branches.bbalance.
 */
import { defineService } from 'sluice/service';

interface State {
  totals: Map<string, number>;
}

export default defineService<State>({
  init: () => ({ totals: new Map() }),
  handlers: {
    change(state, event, ctx) {
      const change = event.change();
      if (change.table !== 'pgbench_history' || change.op !== 'insert' || change.after === null) return;
      // Images carry exact text; pgbench deltas are small integers, so Number is exact here.
      const row = JSON.parse(change.after) as { bid: string; delta: string };
      const total = (state.totals.get(row.bid) ?? 0) + Number(row.delta);
      state.totals.set(row.bid, total);
      ctx.emit(row.bid, { bid: Number(row.bid), total });
    },
  },
});
