/**
 * The shop's records, as JSON values on its topics (examples/shop/topology.yaml). Amounts are
 * integer cents. Captured rows arrive as the capture `format: json` event (engine/cdc
 * json-format.ts), every column value the column's exact text.
 */

/** A `format: json` capture event (README, Capture into Kafka). */
export interface ChangeEvent {
  op: 'c' | 'u' | 'd' | 'r' | 't';
  before: Record<string, string | null> | null;
  after: Record<string, string | null> | null;
  source: { table: string; stagingId: string; captureTimeMs: number };
}

/** One order line: `qty` items of `sku` at `unitCents` each. */
export interface OrderLine {
  lineNo: number;
  sku: string;
  qty: number;
  unitCents: number;
}

/** assemble's state per order id: the order's header and the lines seen so far. */
export interface OrderDraft {
  customer: string | null;
  /** shop_orders.line_count: how many lines the placed order has. */
  lineCount: number | null;
  lines: OrderLine[];
}

/** An order once placed (topic placed-orders, key: order id). */
export interface PlacedOrder {
  orderId: string;
  customer: string;
  lines: OrderLine[];
}

/** A placed order checked and signed by the pool stage (topic checked-orders, key: order id). */
export interface CheckedOrder extends PlacedOrder {
  /** processors/validate.ts orderSignature. */
  signature: string;
}

/** An invoice (topic invoices, key: customer). */
export interface Invoice {
  orderId: string;
  customer: string;
  lines: number;
  subtotalCents: number;
  discountCents: number;
  taxCents: number;
  totalCents: number;
  /** The checked order's signature. */
  signature: string;
}

/** balances' state per customer (topic balances, key: customer). */
export interface Balance {
  invoicedCents: number;
  invoices: number;
}

/** The payments service's output per payment (queue payments-out, key: customer). */
export interface PaidTotal {
  customer: string;
  paidCents: number;
  payments: number;
}
