/**
 * Event-sourced service `payments` of examples/shop/topology.yaml: what each customer paid, from
 * captured inserts of shop_payments. Output after every payment: `{ customer, paidCents,
 * payments }` keyed by customer. Restart strategy (topology): the totals are rebuilt by replaying
 * the inputs (inputsReplay INPUTS, outputs suppressed), then processing resumes after the last
 * input whose output was written (LAST_WRITTEN), so no payment is counted twice.
 */
import { defineService } from 'sluice/service';
import type { PaidTotal } from '../model.js';

interface State {
  paid: Map<string, PaidTotal>;
}

export default defineService<State>({
  init: () => ({ paid: new Map() }),
  handlers: {
    change(state, event, ctx) {
      const change = event.change();
      if (change.table !== 'shop_payments' || change.after === null) return;
      const row = JSON.parse(change.after) as { customer: string; amount_cents: string };
      const before = state.paid.get(row.customer);
      const next: PaidTotal = {
        customer: row.customer,
        paidCents: (before?.paidCents ?? 0) + Number(row.amount_cents),
        payments: (before?.payments ?? 0) + 1,
      };
      state.paid.set(row.customer, next);
      ctx.emit(row.customer, next);
    },
  },
});
