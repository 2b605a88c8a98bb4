/**
 * Durable handler `validate` of examples/shop/topology.yaml, the shop's pool stage: it runs on a
 * piscina pool (`pool: { threads }`), because its work is CPU only. Each placed order is checked
 * (at least one line, positive quantities, prices and SKU names as the shop writes them) and
 * signed: `signature` is SHA-256 applied `settings.signatureRounds` times to the order's
 * canonical text ({@link orderSignature}), a stand-in for the fraud scoring or enrichment that a
 * real shop computes per order. An order that fails a check throws: retried alone, then
 * dead-lettered (deadLetterTopic) while the others of its batch go on.
 */
import { createHash } from 'node:crypto';
import type { PatternRecord, ProcessorContext } from 'sluice/patterns';
import type { CheckedOrder, OrderLine, PlacedOrder } from '../model.js';

const enc = new TextEncoder();
const SKU = /^sku-\d+$/;

/**
 * The signature of an order: SHA-256 (hex) of `orderId|customer|lineNo:sku:qty:unitCents,...`,
 * then of the previous hex digest, `rounds` times in all. verify.ts recomputes it from the rows.
 */
export function orderSignature(
  orderId: string,
  customer: string,
  lines: readonly OrderLine[],
  rounds: number,
): string {
  let text = `${orderId}|${customer}|${lines.map((l) => `${l.lineNo}:${l.sku}:${l.qty}:${l.unitCents}`).join(',')}`;
  for (let i = 0; i < rounds; i++) text = createHash('sha256').update(text).digest('hex');
  return text;
}

/** @throws Error naming the setting when signatureRounds is not an integer in [1, 100000]. */
export function signatureRoundsOf(settings: Record<string, unknown>): number {
  const v = settings.signatureRounds;
  if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > 100_000)
    throw new Error(
      `validate: settings.signatureRounds must be an integer in [1, 100000], got ${String(v)}`,
    );
  return v as number;
}

/** @throws Error saying what is wrong with the order. */
function check(o: PlacedOrder): void {
  if (o.lines.length === 0) throw new Error(`order ${o.orderId}: no lines`);
  for (const l of o.lines) {
    if (!SKU.test(l.sku))
      throw new Error(`order ${o.orderId} line ${l.lineNo}: bad sku "${l.sku}"`);
    if (!Number.isInteger(l.qty) || l.qty < 1)
      throw new Error(
        `order ${o.orderId} line ${l.lineNo}: qty ${l.qty} is not a positive integer`,
      );
    if (!Number.isInteger(l.unitCents) || l.unitCents < 0)
      throw new Error(
        `order ${o.orderId} line ${l.lineNo}: unitCents ${l.unitCents} is not a price`,
      );
  }
}

export default (ctx: ProcessorContext) => {
  const rounds = signatureRoundsOf(ctx.settings);
  return {
    onNext: (orders: PatternRecord<PlacedOrder>[]) =>
      orders.map((r) => {
        const o = r.value!;
        check(o);
        const checked: CheckedOrder = {
          ...o,
          signature: orderSignature(o.orderId, o.customer, o.lines, rounds),
        };
        // A plain Uint8Array: a pool thread has no ctx.bus to allocate from.
        return { topic: ctx.outputs[0]!, key: r.key, value: enc.encode(JSON.stringify(checked)) };
      }),
  };
};
