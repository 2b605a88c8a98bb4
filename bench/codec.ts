/**
 * Codec benchmark: FlatBuffers envelope (engine/codec) versus JSON.stringify/parse of the same
 * object, in the same process and run. `runCodecBench()` returns a markdown section for
 * bench/RESULTS.md; `node dist/bench/codec.js` prints it.
 *
 * The event: type, a key cycling over 1024 distinct values, event time, a cause (queue,
 * partition, index) and a 64-byte payload. For JSON the payload is a 64-character ASCII string
 * (the form most favourable to JSON; raw bytes would need base64). Encoding ends with bytes in a
 * SharedArrayBuffer-backed slot, as an actor writing a ring record would; decoding reads every
 * field (the FlatBuffers payload as a zero-copy view, the key as a string).
 */
import { cpus } from 'node:os';
import { pathToFileURL } from 'node:url';
import {
  EnvelopeView,
  EnvelopeWriter,
  USER_EVENT_TYPE_MIN,
  queueId,
} from '../engine/codec/index.js';

interface CaseResult {
  name: string;
  nsPerOp: number;
  bytesPerOp: number;
}

const KEYS = Array.from({ length: 1024 }, (_, i) => `account-${100000 + i * 7}`);
const PAYLOAD_TEXT = 'p'.repeat(24) + '{"delta":-250,"teller":42}' + 'q'.repeat(14); // 64 chars
const PAYLOAD_BYTES = new TextEncoder().encode(PAYLOAD_TEXT);
const QUEUE = queueId('history-changes');
const SLOT_BYTES = 4096;

let sink = 0;

/** Runs `op` in rounds of `batch` calls for about `durationMs`; returns the median ns per call. */
function measure(op: (i: number) => number, durationMs: number): number {
  const batch = 10_000;
  for (let i = 0; i < 50_000; i++) sink += op(i); // warm up: let the JIT settle
  const perRound: number[] = [];
  const deadline = performance.now() + durationMs;
  let i = 0;
  while (performance.now() < deadline || perRound.length < 5) {
    const t0 = process.hrtime.bigint();
    for (let end = i + batch; i < end; i++) sink += op(i);
    perRound.push(Number(process.hrtime.bigint() - t0) / batch);
  }
  perRound.sort((a, b) => a - b);
  return perRound[perRound.length >> 1]!;
}

function runCases(durationMs: number): CaseResult[] {
  const slot = new Uint8Array(new SharedArrayBuffer(SLOT_BYTES));
  const writer = new EnvelopeWriter();
  const view = new EnvelopeView();
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  const eventTimeMs = Date.now();
  const results: CaseResult[] = [];

  const fbInit = (i: number) => ({
    type: USER_EVENT_TYPE_MIN,
    key: KEYS[i & 1023]!,
    eventTimeMs: eventTimeMs + i,
    causeQueue: QUEUE,
    causePartition: 1,
    causeIndex: i,
    payload: PAYLOAD_BYTES,
  });
  const jsonObject = (i: number) => ({
    type: USER_EVENT_TYPE_MIN,
    key: KEYS[i & 1023]!,
    eventTimeMs: eventTimeMs + i,
    cause: { queue: QUEUE, partition: 1, index: i },
    payload: PAYLOAD_TEXT,
  });

  const fbSize = writer.build(fbInit(0));
  results.push({
    name: 'FlatBuffers encode: build + copy into SAB slot',
    bytesPerOp: fbSize,
    nsPerOp: measure((i) => writer.encodeInto(fbInit(i), slot, 0), durationMs),
  });
  results.push({
    name: 'FlatBuffers encode: build + copy to new Uint8Array',
    bytesPerOp: fbSize,
    nsPerOp: measure((i) => writer.encode(fbInit(i)).length, durationMs),
  });
  const jsonSize = encoder.encode(JSON.stringify(jsonObject(0))).length;
  results.push({
    name: 'JSON encode: stringify + encodeInto SAB slot',
    bytesPerOp: jsonSize,
    nsPerOp: measure(
      (i) => encoder.encodeInto(JSON.stringify(jsonObject(i)), slot).written,
      durationMs,
    ),
  });
  const slotBuffer = Buffer.from(slot.buffer);
  results.push({
    name: 'JSON encode: stringify + Buffer#write into SAB slot',
    bytesPerOp: jsonSize,
    nsPerOp: measure((i) => slotBuffer.write(JSON.stringify(jsonObject(i)), 0), durationMs),
  });
  results.push({
    name: 'JSON encode: stringify only (string, no bytes)',
    bytesPerOp: jsonSize,
    nsPerOp: measure((i) => JSON.stringify(jsonObject(i)).length, durationMs),
  });

  // Decoding reads records that differ in key and cause, as a consumer of a ring would.
  const records = 1024;
  const fbArea = new Uint8Array(new SharedArrayBuffer(records * 256));
  const fbLengths: number[] = [];
  for (let i = 0; i < records; i++) fbLengths.push(writer.encodeInto(fbInit(i), fbArea, i * 256));
  results.push({
    name: 'FlatBuffers decode: wrap + read all fields (payload view)',
    bytesPerOp: fbSize,
    nsPerOp: measure((i) => {
      const r = i & (records - 1);
      view.wrap(fbArea, r * 256, fbLengths[r]!);
      return (
        view.type +
        view.key!.length +
        view.eventTimeMs +
        view.causeQueue +
        view.causePartition +
        view.causeIndex +
        view.payload.length
      );
    }, durationMs),
  });
  results.push({
    name: 'FlatBuffers decode: wrap + numeric fields + payload view (no key string)',
    bytesPerOp: fbSize,
    nsPerOp: measure((i) => {
      const r = i & (records - 1);
      view.wrap(fbArea, r * 256, fbLengths[r]!);
      return view.type + view.eventTimeMs + view.causeIndex + view.payload.length;
    }, durationMs),
  });
  const jsonArea = new Uint8Array(new SharedArrayBuffer(records * 256));
  const jsonLengths: number[] = [];
  for (let i = 0; i < records; i++) {
    jsonLengths.push(
      encoder.encodeInto(JSON.stringify(jsonObject(i)), jsonArea.subarray(i * 256)).written,
    );
  }
  results.push({
    name: 'JSON decode: TextDecoder + JSON.parse + read all fields',
    bytesPerOp: jsonSize,
    nsPerOp: measure((i) => {
      const r = i & (records - 1);
      const o = JSON.parse(
        decoder.decode(jsonArea.subarray(r * 256, r * 256 + jsonLengths[r]!)),
      ) as ReturnType<typeof jsonObject>;
      return (
        o.type +
        o.key.length +
        o.eventTimeMs +
        o.cause.queue +
        o.cause.partition +
        o.cause.index +
        o.payload.length
      );
    }, durationMs),
  });
  const jsonAreaBuffer = Buffer.from(jsonArea.buffer);
  results.push({
    name: 'JSON decode: Buffer#toString + JSON.parse + read all fields',
    bytesPerOp: jsonSize,
    nsPerOp: measure((i) => {
      const r = i & (records - 1);
      const o = JSON.parse(
        jsonAreaBuffer.toString('utf8', r * 256, r * 256 + jsonLengths[r]!),
      ) as ReturnType<typeof jsonObject>;
      return (
        o.type +
        o.key.length +
        o.eventTimeMs +
        o.cause.queue +
        o.cause.partition +
        o.cause.index +
        o.payload.length
      );
    }, durationMs),
  });
  return results;
}

/** Runs the codec benchmark (about 1 s per case) and returns a markdown "## Codec" section. */
export async function runCodecBench(durationMs = 1000): Promise<string> {
  const results = runCases(durationMs);
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const lines = [
    '## Codec',
    '',
    `Machine: ${cpus().length} CPUs (nproc), ${cpu}; Node ${process.version}; ` +
      `${new Date().toISOString().slice(0, 10)}. \`node dist/bench/codec.js\`.`,
    '',
    'One event: user type, key cycling over 1024 values, event time, cause, 64-byte payload ' +
      '(JSON: the same object with the payload as a 64-char string). Median of ~1 s of 10k-call rounds.',
    '',
    '| case | ns/op | ops/s | bytes |',
    '|---|---:|---:|---:|',
    ...results.map(
      (r) =>
        `| ${r.name} | ${r.nsPerOp.toFixed(0)} | ${(1e9 / r.nsPerOp / 1e6).toFixed(2)} M | ${r.bytesPerOp} |`,
    ),
    '',
  ];
  if (sink === -1) lines.push(''); // keeps `sink` observable so no case is optimized away
  return lines.join('\n');
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await runCodecBench());
}
