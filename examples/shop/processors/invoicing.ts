/**
 * Durable handler `invoicing` of examples/shop/topology.yaml: prices each checked order and
 * writes its invoice, keyed by customer, to the first output topic. The invoices of a batch and
 * the batch's consumed positions commit in one transaction: each order is invoiced exactly once.
 *
 * Pricing (`settings`): subtotal = sum of qty * unitCents; a discount of `discountPercent` of the
 * subtotal from `discountFromCents` on; tax `taxPercent` of what is left; each rounded to a cent.
 */
import type { PatternRecord, ProcessorContext } from 'sluice/patterns';
import type { CheckedOrder, Invoice } from '../model.js';

const enc = new TextEncoder();

/** The pricing settings, checked: each a finite number >= 0. */
export interface PricingSettings {
  taxPercent: number;
  discountPercent: number;
  discountFromCents: number;
}

/** @throws Error naming the setting when one is missing or not a number >= 0. */
export function pricingSettingsOf(settings: Record<string, unknown>): PricingSettings {
  const get = (name: keyof PricingSettings): number => {
    const v = settings[name];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
      throw new Error(`invoicing: settings.${name} must be a number >= 0, got ${String(v)}`);
    return v;
  };
  return {
    taxPercent: get('taxPercent'),
    discountPercent: get('discountPercent'),
    discountFromCents: get('discountFromCents'),
  };
}

export default (ctx: ProcessorContext) => {
  const pricing = pricingSettingsOf(ctx.settings);
  return {
    onNext: (orders: PatternRecord<CheckedOrder>[]) =>
      orders.map((o) => {
        const order = o.value!;
        const subtotalCents = order.lines.reduce((n, l) => n + l.qty * l.unitCents, 0);
        const discountCents =
          subtotalCents >= pricing.discountFromCents
            ? Math.round((subtotalCents * pricing.discountPercent) / 100)
            : 0;
        const taxCents = Math.round(((subtotalCents - discountCents) * pricing.taxPercent) / 100);
        const invoice: Invoice = {
          orderId: order.orderId,
          customer: order.customer,
          lines: order.lines.length,
          subtotalCents,
          discountCents,
          taxCents,
          totalCents: subtotalCents - discountCents + taxCents,
          signature: order.signature,
        };
        return {
          topic: ctx.outputs[0]!,
          key: invoice.customer,
          value: enc.encode(JSON.stringify(invoice)),
        };
      }),
  };
};
