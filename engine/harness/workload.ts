/**
 * The benchmark harness's synthetic workload: keys drawn uniformly or by a Zipf law, and JSON
 * records of about a given size, or built from a user's template. Deterministic for a seed.
 */
import type { Topology } from '../config/index.js';

/** What a generator worker is started with (structured clone). */
export interface GeneratorData {
  topology: Topology;
  queue: string;
  /** Records per second for this queue; 0 = as fast as possible. */
  ratePerSecond: number;
  durationMs: number;
  /** Approximate JSON size of a synthetic record, bytes (ignored with a template). */
  recordBytes: number;
  /** Distinct keys, `k0` .. `k<keys-1>`. */
  keys: number;
  /** Zipf exponent s of the key distribution; 0 = uniform. */
  skew: number;
  seed: number;
  /** A JSON value whose strings "$key", "$seq" and "$ts" are replaced per record; null: synthetic. */
  template: unknown;
  /** Int32 word the harness sets to 1 to stop the generator early. */
  stop: SharedArrayBuffer;
}

/** mulberry32: a small seeded PRNG (Tommy Ettinger, public domain), floats in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A function returning keys `k<i>`, i in [0, keys): uniform when `skew` is 0, else Zipf with
 * exponent `skew` (P(i) proportional to 1/(i+1)^skew), drawn by binary search in the CDF.
 * @throws RangeError for keys < 1 or keys > 10^7, or a negative or non-finite skew.
 */
export function keyChooser(keys: number, skew: number, seed: number): () => string {
  if (!Number.isInteger(keys) || keys < 1 || keys > 10_000_000)
    throw new RangeError(`keys must be an integer 1..10000000, keys=${keys}`);
  if (!Number.isFinite(skew) || skew < 0)
    throw new RangeError(`skew must be a number >= 0, skew=${skew}`);
  const random = prng(seed);
  const names = Array.from({ length: keys }, (_, i) => `k${i}`);
  if (skew === 0) return () => names[Math.floor(random() * keys)]!;
  const cdf = new Float64Array(keys);
  let sum = 0;
  for (let i = 0; i < keys; i++) cdf[i] = sum += 1 / Math.pow(i + 1, skew);
  for (let i = 0; i < keys; i++) cdf[i]! /= sum;
  return () => {
    const u = random();
    let lo = 0;
    let hi = keys - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return names[lo]!;
  };
}

/**
 * A function making one record's value: the template with "$key", "$seq", "$ts" replaced, or
 * `{ key, seq, ts, pad }` with `pad` sized so that the JSON is about `recordBytes` long (at least
 * the other fields). `bytes` is the JSON length of the synthetic form (template: of the first).
 */
export function recordMaker(
  recordBytes: number,
  template: unknown,
): (key: string, seq: number, ts: number) => { value: unknown; bytes: number } {
  if (template !== null && template !== undefined) {
    const bytes = JSON.stringify(template).length;
    const fill = (v: unknown, key: string, seq: number, ts: number): unknown => {
      if (v === '$key') return key;
      if (v === '$seq') return seq;
      if (v === '$ts') return ts;
      if (Array.isArray(v)) return v.map((x) => fill(x, key, seq, ts));
      if (v !== null && typeof v === 'object') {
        const o: Record<string, unknown> = {};
        for (const [k, x] of Object.entries(v)) o[k] = fill(x, key, seq, ts);
        return o;
      }
      return v;
    };
    return (key, seq, ts) => ({ value: fill(template, key, seq, ts), bytes });
  }
  // {"key":"k123","seq":1234567,"ts":1700000000000,"pad":""} is about 56 bytes.
  const pad = 'x'.repeat(Math.max(0, recordBytes - 56));
  return (key, seq, ts) => ({ value: { key, seq, ts, pad }, bytes: 56 + pad.length });
}
