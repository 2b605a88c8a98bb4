/**
 * State-and-event handler `balances` of examples/shop/topology.yaml: per customer, the invoiced
 * total and the invoice count. A partition's states are loaded before its first invoice, and each
 * new state commits with the invoice's position.
 */
import type { PatternRecord } from 'sluice/patterns';
import type { Balance, Invoice } from '../model.js';

export default {
  onNext: (balance: Balance | null, invoice: PatternRecord<Invoice>) => ({
    state: {
      invoicedCents: (balance?.invoicedCents ?? 0) + invoice.value!.totalCents,
      invoices: (balance?.invoices ?? 0) + 1,
    } satisfies Balance,
  }),
};
