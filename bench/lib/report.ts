/**
 * Small helpers shared by benchmarks: medians, number formatting, markdown tables, the machine
 * line every RESULTS.md section starts with, and "is this file run directly".
 */
import { availableParallelism, cpus } from 'node:os';
import { pathToFileURL } from 'node:url';

/** Median of `values` (mean of the middle two for an even count). Throws Error if empty. */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new Error('median of no values');
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** `value` with an SI suffix and 3 significant digits: 12345678 -> "12.3 M". */
export function si(value: number): string {
  const units: [number, string][] = [
    [1e9, ' G'],
    [1e6, ' M'],
    [1e3, ' k'],
  ];
  for (const [scale, suffix] of units) {
    if (Math.abs(value) >= scale) return (value / scale).toPrecision(3) + suffix;
  }
  return value.toPrecision(3);
}

/** A markdown table; `align` per column: 'l' or 'r' (default 'r' except the first column). */
export function markdownTable(
  header: readonly string[],
  rows: readonly string[][],
  align?: readonly ('l' | 'r')[],
): string {
  const rule = header.map((_, i) =>
    (align?.[i] ?? (i === 0 ? 'l' : 'r')) === 'r' ? '---:' : '---',
  );
  return [header, rule, ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

/** One line naming the machine: CPU count, model, Node version, date (UTC, yyyy-mm-dd). */
export function machineLine(): string {
  const model = cpus()[0]?.model.trim() ?? 'unknown CPU';
  return (
    `${availableParallelism()} CPUs (nproc), ${model}; Node ${process.version}; ` +
    `${new Date().toISOString().slice(0, 10)}`
  );
}

/** True when the module at `metaUrl` (its import.meta.url) is the script node was started with. */
export function isMainModule(metaUrl: string): boolean {
  const entry = process.argv[1];
  return entry !== undefined && pathToFileURL(entry).href === metaUrl;
}
