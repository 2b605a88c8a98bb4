/**
 * accounts: the latest abalance per account, from captured updates of pgbench_accounts.
 * Output: `{ aid, abalance }` keyed by aid after every change; the bank job checks the newest
 * output per account against pgbench_accounts.abalance.
 */
import { defineService } from 'sluice/service';

interface State {
  balances: Map<string, string>;
}

export default defineService<State>({
  init: () => ({ balances: new Map() }),
  handlers: {
    change(state, event, ctx) {
      const change = event.change();
      if (change.table !== 'pgbench_accounts' || change.after === null) return;
      const row = JSON.parse(change.after) as { aid: string; abalance: string };
      state.balances.set(row.aid, row.abalance);
      ctx.emit(row.aid, { aid: Number(row.aid), abalance: Number(row.abalance) });
    },
  },
});
