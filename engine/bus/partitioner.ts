import { BusError, type ProducerRecord } from './types.js';

const utf8 = new TextEncoder();

/**
 * Kafka's murmur2: the 32-bit MurmurHash2 variant with seed 0x9747b28c used by the Java client's
 * default partitioner. Returns a signed int32, exactly as Java `Utils.murmur2(byte[])` does
 * (Apache Kafka clients/src/main/java/org/apache/kafka/common/utils/Utils.java; vectors from its
 * UtilsTest.testMurmur2: "21" -> -973932308, "foobar" -> -790332482).
 */
export function murmur2(data: Uint8Array): number {
  return murmur2Prefix(data, data.length);
}

/** {@link murmur2} of `data[0, length)`. */
function murmur2Prefix(data: Uint8Array, length: number): number {
  const m = 0x5bd1e995;
  let h = (0x9747b28c ^ length) | 0;
  const length4 = length & ~3;
  for (let i = 0; i < length4; i += 4) {
    let k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  // The Java switch falls through from case 3 to case 1; written as nested conditions.
  const tail = length & 3;
  if (tail > 0) {
    if (tail === 3) h ^= data[length4 + 2] << 16;
    if (tail >= 2) h ^= data[length4 + 1] << 8;
    h ^= data[length4];
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

/**
 * The partition of a key: `toPositive(murmur2(utf8(key))) % partitions`, Kafka's
 * DefaultPartitioner / BuiltInPartitioner.partitionForKey. Every backend uses it, so a key lands
 * on the same partition number on memory, journal and kafka. Throws if partitions < 1.
 */
export function partitionForKey(key: string, partitions: number): number {
  if (!(partitions >= 1))
    throw new BusError('bad-input', `partitions must be >= 1, partitions=${partitions}`);
  const length = utf8Into(key);
  return (murmur2Prefix(keyScratch, length) & 0x7fffffff) % partitions;
}

/** Reused by {@link partitionForKey}: encoding every key into a fresh array cost ~0.6 us per record. */
let keyScratch = new Uint8Array(256);

/** Writes the UTF-8 bytes of `s` to the start of `keyScratch` (grown as needed); returns their count. */
function utf8Into(s: string): number {
  // At most 3 bytes per UTF-16 unit (a surrogate pair is 2 units -> 4 bytes).
  if (s.length * 3 > keyScratch.length) keyScratch = new Uint8Array(s.length * 3);
  const n = s.length;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) return utf8.encodeInto(s, keyScratch).written;
    keyScratch[i] = c;
  }
  return n;
}

/**
 * Resolves the partition of each record for one producer: explicit partition (range-checked),
 * else the key's partition, else round-robin per topic (keyless records have no affinity).
 * Partition counts are looked up once per topic and cached (topics never change partition count).
 */
export class PartitionResolver {
  private readonly counts = new Map<string, number>();
  private readonly roundRobin = new Map<string, number>();

  /** `lookup` returns the topic's partition count or null when the topic does not exist. */
  constructor(private readonly lookup: (topic: string) => Promise<number | null> | number | null) {}

  /** Partition count of a topic; throws BusError 'unknown-topic'. */
  async count(topic: string): Promise<number> {
    let n = this.counts.get(topic);
    if (n === undefined) {
      const found = await this.lookup(topic);
      if (found === null)
        throw new BusError('unknown-topic', `topic does not exist, topic=${topic}`);
      n = found;
      this.counts.set(topic, n);
    }
    return n;
  }

  /** Partition per record, same order as `records`. Throws 'unknown-topic', 'bad-input'. */
  async resolve(records: readonly ProducerRecord[]): Promise<number[]> {
    const out = new Array<number>(records.length);
    for (let i = 0; i < records.length; i++) {
      const r = records[i];
      const n = this.counts.get(r.topic) ?? (await this.count(r.topic));
      if (r.partition !== undefined) {
        if (!Number.isInteger(r.partition) || r.partition < 0 || r.partition >= n) {
          throw new BusError(
            'bad-input',
            `partition out of range [0, ${n}), topic=${r.topic} partition=${r.partition}`,
          );
        }
        out[i] = r.partition;
      } else if (r.key !== null) {
        out[i] = partitionForKey(r.key, n);
      } else {
        const next = this.roundRobin.get(r.topic) ?? 0;
        this.roundRobin.set(r.topic, next + 1);
        out[i] = next % n;
      }
    }
    return out;
  }
}

/** `topic:partition`, the map key used for partitions throughout engine/bus. */
export function tpKey(topic: string, partition: number): string {
  return `${topic}:${partition}`;
}
