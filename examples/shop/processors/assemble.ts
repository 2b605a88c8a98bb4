/**
 * State-and-event handler `assemble` of examples/shop/topology.yaml: per order id (the key of
 * both captured tables), the order's header and lines as they are inserted; when the order's
 * status becomes `placed` the complete order goes to the first output topic and the state is
 * deleted. The state, the output and the consumed position commit in one transaction, so each
 * placed order is written once, whatever restarts.
 */
import type { PatternRecord, ProcessorContext } from 'sluice/patterns';
import type { ChangeEvent, OrderDraft, PlacedOrder } from '../model.js';

const enc = new TextEncoder();

/** The order id of a capture key (`["42"]`, a JSON array of the key columns' text). */
function orderIdOf(key: string | null): string {
  const parsed: unknown = key === null ? null : JSON.parse(key);
  if (!Array.isArray(parsed) || typeof parsed[0] !== 'string')
    throw new Error(`assemble: record key ${key} is not a captured order id key`);
  return parsed[0];
}

export default (ctx: ProcessorContext) => ({
  onNext(draft: OrderDraft | null, rec: PatternRecord<ChangeEvent>) {
    const ev = rec.value!;
    const row = ev.after;
    const current: OrderDraft = draft ?? { customer: null, lineCount: null, lines: [] };
    if (row === null) return {}; // deletes are not captured (operations: insert, update)
    if (ev.source.table === 'shop_order_lines') {
      const line = {
        lineNo: Number(row.line_no),
        sku: row.sku!,
        qty: Number(row.qty),
        unitCents: Number(row.unit_cents),
      };
      return { state: { ...current, lines: [...current.lines, line] } };
    }
    const header = { ...current, customer: row.customer!, lineCount: Number(row.line_count) };
    if (row.status !== 'placed' || ev.before?.status === 'placed') return { state: header };
    if (header.lines.length !== header.lineCount)
      throw new Error(
        `assemble: order ${orderIdOf(rec.key)} placed with ${header.lines.length} of ${header.lineCount} lines`,
      );
    const placed: PlacedOrder = {
      orderId: orderIdOf(rec.key),
      customer: header.customer!,
      lines: header.lines,
    };
    return {
      state: null,
      outputs: [
        { topic: ctx.outputs[0]!, key: placed.orderId, value: enc.encode(JSON.stringify(placed)) },
      ],
    };
  },
});
