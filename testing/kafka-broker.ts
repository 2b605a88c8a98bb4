/**
 * A real Apache Kafka broker (KRaft) on 127.0.0.1 for tests and examples: a thin wrapper over
 * tools/kafka/kafka.sh (the jars come from Maven Central once, tools/kafka/pom.xml). Needs Java 17+
 * and, on the first run, Maven.
 *
 * - {@link startKafka}: a private single node or 3-node cluster; stop, kill and restart nodes.
 * - {@link testKafka}: the broker a test should use: the run's shared broker when
 *   SLUICE_KAFKA_BROKERS is set (scripts/run-tests.mjs starts one per run), else a private one.
 *
 * Broker logs go to `<dir>/node-<id>/logs/server.log`, never to the console.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Options of {@link startKafka}. */
export interface KafkaStartOptions {
  /**
   * Node count: 1 (default), one combined broker+controller with replication factor 1; or 3,
   * three combined nodes with replication factor 3 and min.insync.replicas 2 (internal topics too).
   */
  brokers?: 1 | 3;
  /** State directory (must not hold a cluster yet); default a new one under os.tmpdir(), removed by stop(). */
  dir?: string;
  /** Client port of node 1 (node N: port + N - 1); default free ports chosen by the OS. */
  port?: number;
  /**
   * One node only: also a SASL_SSL listener (TLS with a CA made for the run, SASL PLAIN and
   * SCRAM-SHA-512, user `sluice`); see {@link KafkaCluster.secure}.
   */
  secure?: boolean;
}

/** A running cluster started by {@link startKafka}. Node ids are 1..brokers. */
export interface KafkaCluster {
  /** Bootstrap servers of every node, 'host:port', node 1 first. */
  readonly brokers: string[];
  /** State directory: node N keeps `node-N/` (server.properties, data/, logs/server.log). */
  readonly dir: string;
  /**
   * With `secure`: the SASL_SSL listener `host:port`, the CA file that signed the broker's
   * certificate, and the file holding user `sluice`'s password (the same for PLAIN and SCRAM).
   */
  readonly secure?: { broker: string; caFile: string; username: string; passwordFile: string };
  /**
   * Stops every node (SIGTERM, then SIGKILL after 30 s; `kill`: SIGKILL at once) and removes the
   * state directory if startKafka created it. Idempotent.
   */
  stop(opts?: { kill?: boolean }): Promise<void>;
  /** Stops node `id` (SIGTERM and wait; `kill`: kill -9, no clean shutdown). Its port stays reserved. */
  stopBroker(id: number, opts?: { kill?: boolean }): Promise<void>;
  /** Starts node `id` again (same port, same data) and waits until it serves metadata. */
  startBroker(id: number): Promise<void>;
  /** Stops every node (as stopBroker) and starts them again with their data; resolves once all serve metadata. */
  restart(opts?: { kill?: boolean }): Promise<void>;
  /** Path of node `id`'s broker log. */
  logFile(id: number): string;
}

/** The repository root: the nearest ancestor of this file holding tools/kafka/kafka.sh. */
function kafkaScript(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const script = join(dir, 'tools', 'kafka', 'kafka.sh');
    if (existsSync(script)) return script;
    const up = dirname(dir);
    if (up === dir)
      throw new Error(`tools/kafka/kafka.sh not found above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
}

/** Runs kafka.sh with `args`; resolves with its stdout, rejects with its stderr. */
function run(args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'bash',
      [kafkaScript(), ...args],
      { timeout: timeoutMs, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err)
          reject(
            new Error(
              `kafka.sh ${args.join(' ')} failed (${err.code ?? err.signal}): ${stderr.trim() || err.message}`,
            ),
          );
        else resolve(stdout);
      },
    );
  });
}

/**
 * Longest wait of one kafka.sh call, ms: a first Maven resolve plus a loaded machine's JVM start,
 * and at least 150 s more than kafka.sh's own readiness wait (KAFKA_READY_TIMEOUT_S when the call
 * starts, 90 s by default) so that formatting the nodes does not eat into it: the fault suite
 * waits 220 s, and a fixed 240 s cut its cluster starts at a load average of 50 before kafka.sh
 * gave up by itself.
 */
function scriptTimeoutMs(): number {
  return Math.max(240_000, (Number(process.env.KAFKA_READY_TIMEOUT_S) || 90) * 1000 + 150_000);
}

/** Resolves the broker's jars (Maven, cached under ~/.cache/sluice) and returns their directory. */
export async function resolveKafkaLibs(): Promise<string> {
  return (await run(['libs'], scriptTimeoutMs())).trim();
}

/**
 * Formats KRaft storage for a fresh cluster on 127.0.0.1, starts it, and resolves once every node
 * answers a Metadata request listing all nodes (bounded: 90 s per start). The nodes are killed
 * when this process exits, even by a signal or a crash (a watchdog of kafka.sh). Throws when
 * Java or Maven are missing, formatting fails, or a node does not become ready (the message
 * holds the node's last log lines).
 */
export async function startKafka(opts: KafkaStartOptions = {}): Promise<KafkaCluster> {
  const nodes = opts.brokers ?? 1;
  if (nodes !== 1 && nodes !== 3)
    throw new Error(`startKafka: brokers must be 1 or 3, brokers=${String(nodes)}`);
  const own = opts.dir === undefined;
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'sluice-kafka-'));
  const args = [
    'start',
    '--dir',
    dir,
    '--nodes',
    String(nodes),
    '--owner-pid',
    String(process.pid),
  ];
  if (opts.port !== undefined) args.push('--port', String(opts.port));
  if (opts.secure) args.push('--secure');
  let out: string;
  try {
    out = await run(args, scriptTimeoutMs());
  } catch (e) {
    if (own) rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const brokers = /^brokers=(.*)$/m.exec(out)?.[1]?.split(',') ?? [];
  if (brokers.length !== nodes)
    throw new Error(`kafka.sh start printed no brokers= line for ${nodes} nodes: ${out}`);
  let stopped = false;
  const checkId = (id: number): void => {
    if (!Number.isInteger(id) || id < 1 || id > nodes)
      throw new Error(`kafka node id must be 1..${nodes}, id=${id}`);
  };
  const all = Array.from({ length: nodes }, (_, i) => String(i + 1));
  const secureBroker = /^secure=(.*)$/m.exec(out)?.[1];
  const caFile = /^ca=(.*)$/m.exec(out)?.[1];
  if (opts.secure && (secureBroker === undefined || caFile === undefined))
    throw new Error(`kafka.sh start --secure printed no secure= or ca= line: ${out}`);
  return {
    brokers,
    dir,
    ...(opts.secure
      ? {
          secure: {
            broker: secureBroker!,
            caFile: caFile!,
            username: 'sluice',
            passwordFile: join(dir, 'tls', 'sluice.password'),
          },
        }
      : {}),
    async stop({ kill = false } = {}) {
      if (stopped) return;
      stopped = true;
      await run(['stop', '--dir', dir, ...(kill ? ['--kill'] : [])], scriptTimeoutMs());
      if (own) rmSync(dir, { recursive: true, force: true });
    },
    async stopBroker(id, { kill = false } = {}) {
      checkId(id);
      await run(
        ['stop-node', '--dir', dir, String(id), ...(kill ? ['--kill'] : [])],
        scriptTimeoutMs(),
      );
    },
    async startBroker(id) {
      checkId(id);
      await run(['start-node', '--dir', dir, String(id)], scriptTimeoutMs());
    },
    async restart({ kill = false } = {}) {
      await run(
        ['stop-node', '--dir', dir, ...all, ...(kill ? ['--kill'] : [])],
        scriptTimeoutMs(),
      );
      await run(['start-node', '--dir', dir, ...all], scriptTimeoutMs());
    },
    logFile: (id) => join(dir, `node-${id}`, 'logs', 'server.log'),
  };
}

/** The run's shared broker (SLUICE_KAFKA_BROKERS, comma separated), or null when unset. */
export function sharedKafkaBrokers(): string[] | null {
  const v = process.env.SLUICE_KAFKA_BROKERS?.trim();
  return v ? v.split(',').map((b) => b.trim()) : null;
}

/** A broker for a test file: its bootstrap servers and how to let go of it. */
export interface TestKafka {
  readonly brokers: string[];
  /** Stops the broker if this call started it; a no-op for the shared one. */
  release(): Promise<void>;
}

/**
 * The broker a test file should use when it needs no private one (tests that stop or restart
 * brokers call {@link startKafka}): the shared broker from SLUICE_KAFKA_BROKERS, else a private
 * single node started here. Tests on a shared broker use topic and group names of their own.
 */
export async function testKafka(): Promise<TestKafka> {
  const shared = sharedKafkaBrokers();
  if (shared) return { brokers: shared, release: async () => undefined };
  const k = await startKafka();
  return { brokers: k.brokers, release: () => k.stop({ kill: true }) };
}
