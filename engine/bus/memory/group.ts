import { tpKey } from '../partitioner.js';
import type { TopicPartition } from '../types.js';

/** What the group needs from a member. */
export interface GroupMember {
  readonly memberId: string;
  readonly topics: readonly string[];
  /** Partitions the group wants this member to own; the member reconciles in its next poll(). */
  target: Map<string, TopicPartition>;
  generationId: number;
}

/**
 * Kafka's RangeAssignor: per topic, members subscribed to it sorted by member id; each gets a
 * contiguous range of floor(n/k) partitions, the first n%k one more
 * (org.apache.kafka.clients.consumer.RangeAssignor). Returns memberId -> partitions.
 */
export function rangeAssign(
  members: readonly { memberId: string; topics: readonly string[] }[],
  partitionCount: (topic: string) => number,
): Map<string, TopicPartition[]> {
  const out = new Map<string, TopicPartition[]>(members.map((m) => [m.memberId, []]));
  const topics = [...new Set(members.flatMap((m) => m.topics))].sort();
  for (const topic of topics) {
    const subs = members
      .filter((m) => m.topics.includes(topic))
      .map((m) => m.memberId)
      .sort();
    const n = partitionCount(topic);
    const per = Math.floor(n / subs.length);
    const extra = n % subs.length;
    let p = 0;
    subs.forEach((id, i) => {
      const count = per + (i < extra ? 1 : 0);
      for (let j = 0; j < count; j++, p++) out.get(id)!.push({ topic, partition: p });
    });
  }
  return out;
}

/**
 * A consumer group of one memory bus: committed offsets, members, and which member owns which
 * partition. Rebalancing is incremental (as Kafka's cooperative protocol): a partition moves only
 * after its old owner revoked it in its own poll() or left, so two members never own one
 * partition at once. There is no session timeout: members leave by close().
 */
export class MemoryGroup {
  readonly committed = new Map<string, number>();
  /**
   * tpKey -> the durability of a transaction that is committing offsets for it (its store's
   * sync): a committed-offset read waits for it, as a Kafka OffsetFetch with require_stable
   * (KIP-447) gets UNSTABLE_OFFSET_COMMIT until the transaction completes. Without the wait, a
   * member that takes a partition over while its old owner's commit syncs starts from the offset
   * before that commit and processes its records a second time.
   */
  readonly pending = new Map<string, Promise<unknown>>();
  readonly members = new Map<string, GroupMember>();
  /** tpKey -> memberId of the current owner. */
  readonly owner = new Map<string, string>();
  private generation = 0;

  constructor(readonly groupId: string) {}

  join(member: GroupMember, partitionCount: (topic: string) => number): void {
    this.members.set(member.memberId, member);
    this.rebalance(partitionCount);
  }

  leave(memberId: string, partitionCount: (topic: string) => number): void {
    this.members.delete(memberId);
    for (const [k, id] of this.owner) if (id === memberId) this.owner.delete(k);
    this.rebalance(partitionCount);
  }

  /** Recomputes every member's target assignment (new generation). */
  rebalance(partitionCount: (topic: string) => number): void {
    this.generation++;
    const plan = rangeAssign([...this.members.values()], partitionCount);
    for (const m of this.members.values()) {
      m.target = new Map(
        (plan.get(m.memberId) ?? []).map((tp) => [tpKey(tp.topic, tp.partition), tp]),
      );
      m.generationId = this.generation;
    }
  }

  /** True when `memberId` currently owns every partition in `keys`. */
  owns(memberId: string, keys: Iterable<string>): boolean {
    for (const k of keys) if (this.owner.get(k) !== memberId) return false;
    return true;
  }
}
