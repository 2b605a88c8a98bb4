/**
 * Durable handler of examples/processors/topology.yaml: each order becomes an invoice with tax
 * (`settings.taxPercent`), keyed by customer, on the processor's first output topic.
 */
import type { PatternRecord, ProcessorContext } from 'sluice/patterns';

export interface Order {
  id: string;
  customer: string;
  amountCents: number;
}
export interface Invoice {
  orderId: string;
  customer: string;
  totalCents: number;
}

const enc = new TextEncoder();

export default (ctx: ProcessorContext) => {
  const taxPercent = Number(ctx.settings.taxPercent ?? 0);
  return {
    onNext: (orders: PatternRecord<Order>[]) =>
      orders.map((o) => {
        const invoice: Invoice = {
          orderId: o.value!.id,
          customer: o.value!.customer,
          totalCents: Math.round((o.value!.amountCents * (100 + taxPercent)) / 100),
        };
        return {
          topic: ctx.outputs[0]!,
          key: invoice.customer,
          value: enc.encode(JSON.stringify(invoice)),
        };
      }),
  };
};
