/** State-and-event handler of examples/processors/topology.yaml: a customer's balance is the sum of their invoices. */
import type { PatternRecord } from 'sluice/patterns';
import type { Invoice } from './invoicing.js';

export default {
  onNext: (balance: number | null, invoice: PatternRecord<Invoice>) => ({
    state: (balance ?? 0) + invoice.value!.totalCents,
  }),
};
