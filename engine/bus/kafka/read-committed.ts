/**
 * A correct read_committed filter for kafkajs, installed into Node's module cache before kafkajs
 * loads (import this module before `kafkajs`; engine/bus/kafka/kafkajs.ts does).
 *
 * Why: kafkajs 2.2.4 (src/consumer/filterAbortedMessages.js) walks the Fetch response's aborted
 * transactions in the order the broker lists them and takes at most one per record. The broker
 * lists them in the order they were aborted (its transaction index is appended at each ABORT
 * marker), not by first offset. When two producers' transactions overlap in a partition and the
 * later-started one is aborted first (two transactional producers killed together, then fenced
 * one after the other by their restarts), kafkajs returns the earlier one's records although it
 * was aborted: a read_committed consumer saw a killed sink's open batch as committed (5
 * "duplicates" of 600 records, test/sink-kafka.test.ts). Kafka's Java client sorts the list by
 * first offset (KafkaConsumer's CompletedFetch; "the entries in the abort index are sorted by
 * abort order, but not necessarily first offset order", confluentinc/kafka#145 review).
 *
 * The filter below is the Java client's: aborted transactions ordered by first offset; before a
 * record of producer P at offset o, every listed transaction with first offset <= o marks its
 * producer aborted; a transactional data record of a producer marked aborted is dropped; an ABORT
 * control record of P unmarks P (an ABORT marker whose transaction is not listed only unmarks, as
 * librdkafka#3369). Control records are kept here; kafkajs' Batch drops them after this filter.
 */
import Module, { createRequire } from 'node:module';

/** The parts of a kafkajs message the filter reads. */
interface FetchedMessage {
  offset: string;
  key: Buffer | null;
  isControlRecord?: boolean;
  batchContext: { producerId: string; inTransaction: boolean; isControlBatch?: boolean };
}

/** One entry of a Fetch response's aborted transactions (kafkajs decodes both as strings). */
interface AbortedTransaction {
  producerId: string;
  firstOffset: string;
}

/** Key of an ABORT control record: version 0 (int16), type 0 (int16); COMMIT has type 1. */
function isAbortMarker(m: FetchedMessage): boolean {
  const k = m.key;
  return (
    m.isControlRecord === true &&
    k !== null &&
    k.length >= 4 &&
    k.readInt16BE(0) === 0 &&
    k.readInt16BE(2) === 0
  );
}

/**
 * The records of one fetched partition a read_committed consumer may see (see the module
 * comment); same contract as kafkajs' filterAbortedMessages: `messages` in offset order, from
 * one Fetch response, with its `abortedTransactions`.
 */
export function filterAbortedRecords<M extends FetchedMessage>({
  messages,
  abortedTransactions,
}: {
  messages: M[];
  abortedTransactions?: AbortedTransaction[] | null;
}): M[] {
  if (!abortedTransactions || abortedTransactions.length === 0) return messages;
  const pending = abortedTransactions
    .map((t) => ({ producerId: String(t.producerId), firstOffset: BigInt(t.firstOffset) }))
    .sort((a, b) => (a.firstOffset < b.firstOffset ? -1 : a.firstOffset > b.firstOffset ? 1 : 0));
  const aborted = new Set<string>();
  let next = 0;
  return messages.filter((m) => {
    const offset = BigInt(m.offset);
    while (next < pending.length && pending[next]!.firstOffset <= offset)
      aborted.add(pending[next++]!.producerId);
    const producerId = String(m.batchContext.producerId);
    if (isAbortMarker(m)) {
      aborted.delete(producerId);
      return true;
    }
    return !(m.batchContext.inTransaction && m.isControlRecord !== true && aborted.has(producerId));
  });
}

const require = createRequire(import.meta.url);
const filterFile = require.resolve('kafkajs/src/consumer/filterAbortedMessages.js');
const batchFile = require.resolve('kafkajs/src/consumer/batch.js');

// kafkajs' batch.js binds `require('./filterAbortedMessages')` when it loads: the module must be
// in the cache before that, so this runs at import, before kafkajs is imported.
if (require.cache[batchFile] === undefined && require.cache[filterFile] === undefined) {
  const m = new Module(filterFile);
  m.filename = filterFile;
  m.loaded = true;
  m.exports = filterAbortedRecords;
  require.cache[filterFile] = m;
}

/**
 * Whether kafkajs in this thread uses {@link filterAbortedRecords}: false when kafkajs was loaded
 * before this module (its own filter is then bound and cannot be replaced).
 */
export function readCommittedFilterInstalled(): boolean {
  return require.cache[filterFile]?.exports === filterAbortedRecords;
}
