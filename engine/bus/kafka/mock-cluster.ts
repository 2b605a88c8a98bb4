/**
 * Starts librdkafka's mock Kafka cluster (tools/kafka-mock/mock-cluster.c) as a child process
 * on loopback. Built by tools/kafka-mock/build.sh on first use (needs gcc and Debian's
 * librdkafka-dev).
 *
 * Every guarantee of the kafka bus is tested against a real Apache Kafka broker
 * (testing/kafka-broker.ts). The mock stays for one thing a real broker cannot be made to do on
 * demand: answer the next N requests of one API with a chosen error code
 * ({@link KafkaMockCluster.injectRequestErrors}), as test/bus-kafka-offsets.test.ts does for
 * ListOffsets. What it cannot do (librdkafka 2.0.2): it reports controller id 0, so kafkajs'
 * admin.createTopics fails (topics are created by the launcher, {@link KafkaMockCluster.createTopics});
 * it writes no transaction markers and keeps no last stable offset, does not store TxnOffsetCommit
 * offsets, never fences a producer, auto-creates any topic a Metadata request names, and answers
 * a follower's late SyncGroup with INVALID_REQUEST. Nothing but request-error injection should
 * use it.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { BusError, type TopicSpec } from '../types.js';

/** A running mock cluster. */
export interface KafkaMockCluster {
  /** Bootstrap servers, e.g. ['127.0.0.1:39505', ...]. */
  readonly brokers: string[];
  /** Creates topics inside the mock (CreateTopics is not implemented by it). Throws 'backend'. */
  createTopics(topics: TopicSpec[]): Promise<void>;
  /**
   * Makes the next `count` (1..64) requests with Kafka API key `apiKey` (e.g. 26 EndTxn), from any
   * client, fail with Kafka error code `errorCode` (e.g. 47 INVALID_PRODUCER_EPOCH), through
   * librdkafka's `rd_kafka_mock_push_request_errors`. For tests of a client's handling of broker
   * errors the mock never produces itself (it does not fence producers). Throws 'bad-input', 'backend'.
   */
  injectRequestErrors(apiKey: number, errorCode: number, count?: number): Promise<void>;
  /** Closes the launcher's stdin and waits for it to exit (SIGKILL after `timeoutMs`, default 5000). */
  stop(timeoutMs?: number): Promise<void>;
}

/** Options for {@link startKafkaMockCluster}. */
export interface KafkaMockOptions {
  /** Broker count, default 1. */
  brokers?: number;
  /** Topics created at start. */
  topics?: TopicSpec[];
  /** Launcher binary; default dist/tools/kafka-mock/mock-cluster under the repository root. */
  binary?: string;
  /** Longest wait for the launcher to print its bootstrap servers, ms. Default 10000. */
  startTimeoutMs?: number;
}

/** The repository root: the nearest ancestor of this file holding tools/kafka-mock/build.sh. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'tools', 'kafka-mock', 'build.sh'))) return dir;
    const up = dirname(dir);
    if (up === dir)
      throw new BusError(
        'backend',
        `tools/kafka-mock/build.sh not found above ${fileURLToPath(import.meta.url)}`,
      );
    dir = up;
  }
}

/**
 * Starts a mock cluster, building the launcher if it is missing. Throws BusError 'backend' when
 * the build fails or the launcher does not start within `startTimeoutMs`.
 */
export async function startKafkaMockCluster(
  opts: KafkaMockOptions = {},
): Promise<KafkaMockCluster> {
  if (opts.binary && !existsSync(opts.binary))
    throw new BusError('bad-input', `kafka mock binary not found, binary=${opts.binary}`);
  const root = opts.binary ? '' : repoRoot();
  const binary = opts.binary ?? join(root, 'dist', 'tools', 'kafka-mock', 'mock-cluster');
  if (!existsSync(binary)) {
    const built = spawnSync('bash', [join(root, 'tools', 'kafka-mock', 'build.sh'), binary], {
      encoding: 'utf8',
    });
    if (built.status !== 0)
      throw new BusError(
        'backend',
        `building the kafka mock failed: ${built.stderr || built.error}`,
      );
  }
  const child = spawn(binary, [String(opts.brokers ?? 1)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const pending: { resolve: (line: string) => void; reject: (e: Error) => void }[] = [];
  lines.on('line', (line) => pending.shift()?.resolve(line));
  child.once('exit', (code, signal) => {
    for (const p of pending.splice(0))
      p.reject(new BusError('backend', `kafka mock exited (code ${code}, signal ${signal})`));
  });
  const nextLine = (timeoutMs: number, what: string): Promise<string> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new BusError('backend', `kafka mock: no answer within ${timeoutMs} ms to ${what}`),
          ),
        timeoutMs,
      );
      const settle =
        <T>(f: (v: T) => void) =>
        (v: T): void => {
          clearTimeout(timer);
          f(v);
        };
      pending.push({ resolve: settle(resolve), reject: settle(reject) });
    });
  // The mock cannot be asked which topics exist (its Metadata auto-creates them), so remember.
  const created = new Map<string, number>();
  const bootstrap = await nextLine(opts.startTimeoutMs ?? 10_000, 'start');
  const cluster: KafkaMockCluster = {
    brokers: bootstrap.split(','),
    async createTopics(topics) {
      for (const t of topics) {
        const had = created.get(t.name);
        if (had !== undefined) {
          if (had !== t.partitions)
            throw new BusError(
              'bad-input',
              `topic exists with ${had} partitions, topic=${t.name} partitions=${t.partitions}`,
            );
          continue;
        }
        if (!/^[A-Za-z0-9._-]{1,249}$/.test(t.name))
          throw new BusError(
            'bad-input',
            `kafka topic names are [A-Za-z0-9._-]{1,249}, topic=${t.name}`,
          );
        const answer = nextLine(5000, `topic ${t.name}`);
        child.stdin!.write(`topic ${t.name} ${t.partitions}\n`);
        const line = await answer;
        if (line !== `ok ${t.name}`)
          throw new BusError('backend', `kafka mock could not create topic ${t.name}: ${line}`);
        created.set(t.name, t.partitions);
      }
    },
    async injectRequestErrors(apiKey, errorCode, count = 1) {
      if (![apiKey, errorCode, count].every(Number.isInteger) || count < 1 || count > 64) {
        throw new BusError(
          'bad-input',
          `injectRequestErrors needs integers and 1 <= count <= 64, apiKey=${apiKey} errorCode=${errorCode} count=${count}`,
        );
      }
      const answer = nextLine(5000, `errors ${apiKey}`);
      child.stdin!.write(`errors ${apiKey} ${errorCode} ${count}\n`);
      const line = await answer;
      if (line !== `ok errors ${apiKey}`)
        throw new BusError(
          'backend',
          `kafka mock did not take errors for api key ${apiKey}: ${line}`,
        );
    },
    stop: (timeoutMs = 5000) => stopChild(child, timeoutMs),
  };
  await cluster.createTopics(opts.topics ?? []);
  return cluster;
}

function stopChild(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.stdin!.end();
  });
}
