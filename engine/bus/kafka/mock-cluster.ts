/**
 * Starts librdkafka's mock Kafka cluster (tools/kafka-mock/mock-cluster.c) as a child process
 * on loopback, for tests and benchmarks. Built by tools/kafka-mock/build.sh on first use
 * (needs gcc and Debian's librdkafka-dev).
 *
 * What the mock (librdkafka 2.0.2) can and cannot show, as verified by test/bus.kafka.test.ts:
 * - It reports controller id 0, which is no broker: kafkajs admin.createTopics and producers with
 *   `idempotent: true` fail ("Broker 0 not found in the cached metadata"). Topics are created by
 *   the launcher instead ({@link KafkaMockCluster.createTopics}).
 * - A producer with a transactionalId (idempotent left false) runs transactions: begin, produce,
 *   commit and abort succeed.
 * - It writes no transaction markers and keeps no last stable offset: under read_committed,
 *   aborted records and records of still-open transactions are returned like committed ones.
 * - TxnOffsetCommit (sendOffsets in a transaction) is accepted but does not move the group's
 *   committed offsets; plain OffsetCommit does.
 * - InitProducerId returns a new producer id with epoch 0 for every producer, even for a
 *   transactionalId it has seen: no epoch bump, so no producer is ever fenced (test/bus-kafka-fencing.test.ts).
 * - Metadata requests auto-create an unknown topic with 4 partitions, even with
 *   allow_auto_topic_creation=false (kafkajs admin): 'unknown-topic' cannot be shown, and
 *   {@link KafkaMockCluster.createTopics} must run before any client touches a topic.
 * - Consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit/Fetch) work, with one
 *   race: the mock completes a sync as soon as the leader's SyncGroup has brought an assignment for
 *   every member, and answers a follower's SyncGroup that arrives after that with INVALID_REQUEST
 *   (kafkajs then crashes the consumer). A follower in another process, whose first join runs cold
 *   code, loses that race every time (observed: leader 4 ms, follower 10 ms after the JoinGroup
 *   response). {@link mockClusterAssigners} delays the leader's assignment so followers sync first.
 */
import kafkajs, { type PartitionAssigner } from 'kafkajs'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { BusError, type TopicSpec } from '../types.js'

/** A running mock cluster. */
export interface KafkaMockCluster {
  /** Bootstrap servers, e.g. ['127.0.0.1:39505', ...]. */
  readonly brokers: string[]
  /** Creates topics inside the mock (CreateTopics is not implemented by it). Throws 'backend'. */
  createTopics(topics: TopicSpec[]): Promise<void>
  /**
   * Makes the next `count` (1..64) requests with Kafka API key `apiKey` (e.g. 26 EndTxn), from any
   * client, fail with Kafka error code `errorCode` (e.g. 47 INVALID_PRODUCER_EPOCH), through
   * librdkafka's `rd_kafka_mock_push_request_errors`. For tests of a client's handling of broker
   * errors the mock never produces itself (it does not fence producers). Throws 'bad-input', 'backend'.
   */
  injectRequestErrors(apiKey: number, errorCode: number, count?: number): Promise<void>
  /** Closes the launcher's stdin and waits for it to exit (SIGKILL after `timeoutMs`, default 5000). */
  stop(timeoutMs?: number): Promise<void>
}

/** Options for {@link startKafkaMockCluster}. */
export interface KafkaMockOptions {
  /** Broker count, default 1. */
  brokers?: number
  /** Topics created at start. */
  topics?: TopicSpec[]
  /** Launcher binary; default dist/tools/kafka-mock/mock-cluster under the repository root. */
  binary?: string
  /** Longest wait for the launcher to print its bootstrap servers, ms. Default 10000. */
  startTimeoutMs?: number
}

/** The repository root: the nearest ancestor of this file holding tools/kafka-mock/build.sh. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (;;) {
    if (existsSync(join(dir, 'tools', 'kafka-mock', 'build.sh'))) return dir
    const up = dirname(dir)
    if (up === dir) throw new BusError('backend', `tools/kafka-mock/build.sh not found above ${fileURLToPath(import.meta.url)}`)
    dir = up
  }
}

/**
 * Starts a mock cluster, building the launcher if it is missing. Throws BusError 'backend' when
 * the build fails or the launcher does not start within `startTimeoutMs`.
 */
export async function startKafkaMockCluster(opts: KafkaMockOptions = {}): Promise<KafkaMockCluster> {
  if (opts.binary && !existsSync(opts.binary)) throw new BusError('bad-input', `kafka mock binary not found, binary=${opts.binary}`)
  const root = opts.binary ? '' : repoRoot()
  const binary = opts.binary ?? join(root, 'dist', 'tools', 'kafka-mock', 'mock-cluster')
  if (!existsSync(binary)) {
    const built = spawnSync('bash', [join(root, 'tools', 'kafka-mock', 'build.sh'), binary], { encoding: 'utf8' })
    if (built.status !== 0) throw new BusError('backend', `building the kafka mock failed: ${built.stderr || built.error}`)
  }
  const child = spawn(binary, [String(opts.brokers ?? 1)], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout! })
  const pending: { resolve: (line: string) => void; reject: (e: Error) => void }[] = []
  lines.on('line', (line) => pending.shift()?.resolve(line))
  child.once('exit', (code, signal) => {
    for (const p of pending.splice(0)) p.reject(new BusError('backend', `kafka mock exited (code ${code}, signal ${signal})`))
  })
  const nextLine = (timeoutMs: number, what: string): Promise<string> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new BusError('backend', `kafka mock: no answer within ${timeoutMs} ms to ${what}`)), timeoutMs)
      const settle = <T>(f: (v: T) => void) => (v: T): void => {
        clearTimeout(timer)
        f(v)
      }
      pending.push({ resolve: settle(resolve), reject: settle(reject) })
    })
  // The mock cannot be asked which topics exist (its Metadata auto-creates them), so remember.
  const created = new Map<string, number>()
  const bootstrap = await nextLine(opts.startTimeoutMs ?? 10_000, 'start')
  const cluster: KafkaMockCluster = {
    brokers: bootstrap.split(','),
    async createTopics(topics) {
      for (const t of topics) {
        const had = created.get(t.name)
        if (had !== undefined) {
          if (had !== t.partitions) throw new BusError('bad-input', `topic exists with ${had} partitions, topic=${t.name} partitions=${t.partitions}`)
          continue
        }
        if (!/^[A-Za-z0-9._-]{1,249}$/.test(t.name)) throw new BusError('bad-input', `kafka topic names are [A-Za-z0-9._-]{1,249}, topic=${t.name}`)
        const answer = nextLine(5000, `topic ${t.name}`)
        child.stdin!.write(`topic ${t.name} ${t.partitions}\n`)
        const line = await answer
        if (line !== `ok ${t.name}`) throw new BusError('backend', `kafka mock could not create topic ${t.name}: ${line}`)
        created.set(t.name, t.partitions)
      }
    },
    async injectRequestErrors(apiKey, errorCode, count = 1) {
      if (![apiKey, errorCode, count].every(Number.isInteger) || count < 1 || count > 64) {
        throw new BusError('bad-input', `injectRequestErrors needs integers and 1 <= count <= 64, apiKey=${apiKey} errorCode=${errorCode} count=${count}`)
      }
      const answer = nextLine(5000, `errors ${apiKey}`)
      child.stdin!.write(`errors ${apiKey} ${errorCode} ${count}\n`)
      const line = await answer
      if (line !== `ok errors ${apiKey}`) throw new BusError('backend', `kafka mock did not take errors for api key ${apiKey}: ${line}`)
    },
    stop: (timeoutMs = 5000) => stopChild(child, timeoutMs),
  }
  await cluster.createTopics(opts.topics ?? [])
  return cluster
}

/** Default delay of the group leader's assignment on the mock, ms: far above a cold follower's ~10 ms. */
export const MOCK_SYNC_DELAY_MS = 250

/**
 * kafkajs' round-robin assigner (same protocol name, so it mixes with plain members) whose
 * assign() first waits `syncDelayMs`: the leader's SyncGroup then reaches the mock after the
 * followers' (see the file comment). For `createKafkaBus({ partitionAssigners })` on the mock
 * only; every rebalance takes `syncDelayMs` longer.
 */
export function mockClusterAssigners(syncDelayMs: number = MOCK_SYNC_DELAY_MS): PartitionAssigner[] {
  if (!Number.isInteger(syncDelayMs) || syncDelayMs < 0) throw new BusError('bad-input', `syncDelayMs must be an integer >= 0, syncDelayMs=${syncDelayMs}`)
  const roundRobin: PartitionAssigner = kafkajs.PartitionAssigners.roundRobin
  return [(config) => {
    const assigner = roundRobin(config)
    return {
      ...assigner,
      assign: async (group) => {
        await new Promise((r) => setTimeout(r, syncDelayMs))
        return assigner.assign(group)
      },
    }
  }]
}

function stopChild(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.once('exit', () => {
      clearTimeout(timer)
      resolve()
    })
    child.stdin!.end()
  })
}
