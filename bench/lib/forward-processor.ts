/**
 * Handler module of bench/processors.ts, run both as a library and as a processor actor:
 * durable: forwards each input value to the first output (codec bytes); state-and-event: counts
 * events per key in its state (codec json).
 */
import type { PatternRecord, ProcessorContext } from '../../engine/patterns/index.js';

export default (ctx: ProcessorContext) =>
  ctx.pattern === 'durable'
    ? {
        onNext: (records: PatternRecord<Uint8Array>[]) =>
          records.map((r) => ({ topic: ctx.outputs[0]!, key: r.key, value: r.value })),
      }
    : { onNext: (state: number | null) => ({ state: (state ?? 0) + 1 }) };
