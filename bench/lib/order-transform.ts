/**
 * Handler module of bench/pool.ts, the same module inline and on the pool: a CPU-heavy
 * stateless transform per record (codec bytes): decode the UTF-8 JSON order (an id, a customer
 * and 60 lines), validate every field, price it (line totals, tax, a rolling checksum over the
 * lines), and re-encode the priced order as JSON on the first output, keyed like the input.
 * An order that fails validation throws (none does in the bench).
 */
import type { PatternRecord, ProcessorContext } from '../../engine/patterns/index.js';

interface Line {
  sku: string;
  qty: number;
  unitCents: number;
}
interface Order {
  id: string;
  customer: string;
  lines: Line[];
}

const dec = new TextDecoder('utf-8', { fatal: true });
const enc = new TextEncoder();

/** @throws Error naming the order and the field that is wrong. */
function validate(o: unknown): Order {
  const x = o as Partial<Order>;
  if (typeof x !== 'object' || x === null) throw new Error('order is not an object');
  if (typeof x.id !== 'string' || !/^o-\d+$/.test(x.id)) throw new Error(`bad id ${x.id}`);
  if (typeof x.customer !== 'string' || x.customer.length === 0)
    throw new Error(`order ${x.id}: bad customer`);
  if (!Array.isArray(x.lines) || x.lines.length === 0) throw new Error(`order ${x.id}: no lines`);
  for (const [i, l] of x.lines.entries()) {
    if (typeof l.sku !== 'string' || !/^[A-Z]{3}-\d{4}$/.test(l.sku))
      throw new Error(`order ${x.id}: lines[${i}].sku ${l.sku}`);
    if (!Number.isInteger(l.qty) || l.qty < 1) throw new Error(`order ${x.id}: lines[${i}].qty`);
    if (!Number.isInteger(l.unitCents) || l.unitCents < 0)
      throw new Error(`order ${x.id}: lines[${i}].unitCents`);
  }
  return x as Order;
}

/** Prices one encoded order: the priced order, encoded. */
export function priceOrder(bytes: Uint8Array, taxPercent: number): Uint8Array {
  const o = validate(JSON.parse(dec.decode(bytes)));
  let subtotal = 0;
  let check = 0;
  const lines = o.lines.map((l) => {
    const totalCents = l.qty * l.unitCents;
    subtotal += totalCents;
    for (let i = 0; i < l.sku.length; i++) check = (Math.imul(check, 31) + l.sku.charCodeAt(i)) | 0;
    return { ...l, totalCents, taxCents: Math.round((totalCents * taxPercent) / 100) };
  });
  const taxCents = Math.round((subtotal * taxPercent) / 100);
  return enc.encode(
    JSON.stringify({
      id: o.id,
      customer: o.customer,
      lines,
      subtotalCents: subtotal,
      taxCents,
      totalCents: subtotal + taxCents,
      check,
    }),
  );
}

export default (ctx: ProcessorContext) => {
  const taxPercent = Number(ctx.settings.taxPercent ?? 20);
  // Rounds of the transform per record: the knob for the per-record cost.
  const rounds = Number(ctx.settings.rounds ?? 1);
  return {
    onNext: (records: PatternRecord<Uint8Array>[]) =>
      records.map((r) => {
        let value = priceOrder(r.value!, taxPercent);
        for (let i = 1; i < rounds; i++) value = priceOrder(r.value!, taxPercent);
        return { topic: ctx.outputs[0]!, key: r.key, value };
      }),
  };
};
