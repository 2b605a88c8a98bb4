/**
 * The bank job's check: the services' newest outputs against the database. Used by main.ts at
 * the end of a run and by the fault suite (faults/) after every run it interrupts.
 *
 * - every branch: the newest `branch-balances-out` total of its bid equals
 *   pgbench_branches.bbalance (a branch never seen counts as 0);
 * - every account in `accounts-out`: its newest abalance equals pgbench_accounts.abalance;
 * - every account with abalance <> 0 in the database is in `accounts-out`.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { partitionDir, type Topology } from '../../index.js';
import { readBalancesMariaDb } from '../../engine/workload/index.js';
import { openQueueLogs } from '../../engine/service/index.js';
import { actorBusOf } from '../../engine/service/index.js';
import { EnvelopeView, decodeJson, EVENT_TYPE_JSON } from '../../engine/codec/index.js';

/** Longest {@link latestByKey} waits for a read to move on before it gives up, ms. */
const READ_STALL_MS = 30_000;

/**
 * Newest JSON value per key in partition 0 of a service's output queue, read through the
 * topology's bus: the journal partition under `dataDir`, or the Kafka topic (read_committed, so
 * an aborted or open transaction of the service is not seen).
 */
export function latestByKey<T>(topology: Topology, queue: string): Map<string, T> {
  const out = new Map<string, T>();
  const logs = openQueueLogs(actorBusOf(topology));
  try {
    const at = { queue, partition: 0, dir: partitionDir(topology, queue, 0) };
    // The end when the check begins (Kafka: the last stable offset). A Kafka read can come back
    // empty before it (transaction markers, aborted batches), so the loop reads up to the end
    // rather than to the first empty read.
    const probe = logs.tailer(at);
    probe.moveToEnd();
    const end = probe.index;
    probe.close();
    const tailer = logs.tailer(at);
    const view = new EnvelopeView();
    try {
      for (let stalledSinceMs = Date.now(); tailer.index < end;) {
        const from = tailer.index;
        const rec = tailer.next() ?? (tailer.waitForAppend(1000) ? tailer.next() : null);
        if (tailer.index > from) stalledSinceMs = Date.now();
        else if (Date.now() - stalledSinceMs > READ_STALL_MS)
          throw new Error(
            `${queue}/0: no progress at index ${from} of ${end} for ${READ_STALL_MS / 1000} s`,
          );
        if (!rec) continue;
        view.wrap(rec.bytes, 0, rec.bytes.length);
        if (view.type !== EVENT_TYPE_JSON) continue;
        out.set(view.key ?? '', decodeJson(view.payload) as T);
      }
    } finally {
      tailer.close();
    }
  } finally {
    logs.close();
  }
  return out;
}

/** Branch balances and the accounts whose balance is not 0, as the database has them. */
export interface BankBalances {
  branches: { bid: number; bbalance: number }[];
  changedAccounts: Map<number, number>;
}

/** Reads pgbench_branches and the changed pgbench_accounts of the topology's capture database. */
export async function readBankBalances(topology: Topology): Promise<BankBalances> {
  const db = topology.capture[0]?.database;
  if (!db) throw new Error(`topology ${topology.name}: the bank check needs a capture source`);
  if (db.dialect === 'sqlite') {
    const sqlite = new Database(db.file, { readonly: true });
    try {
      const branches = sqlite
        .prepare('SELECT bid, bbalance FROM pgbench_branches ORDER BY bid')
        .all() as BankBalances['branches'];
      const rows = sqlite
        .prepare('SELECT aid, abalance FROM pgbench_accounts WHERE abalance <> 0')
        .all() as { aid: number; abalance: number }[];
      return { branches, changedAccounts: new Map(rows.map((r) => [r.aid, r.abalance])) };
    } finally {
      sqlite.close();
    }
  }
  if (db.dialect === 'mariadb' || db.dialect === 'mysql') {
    const read = await readBalancesMariaDb(db.url);
    return {
      branches: read.branches,
      changedAccounts: new Map(read.accounts.map((r) => [r.aid, r.abalance])),
    };
  }
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const branches = (await client.query('SELECT bid, bbalance FROM pgbench_branches ORDER BY bid'))
      .rows as BankBalances['branches'];
    const rows = (
      await client.query('SELECT aid, abalance FROM pgbench_accounts WHERE abalance <> 0')
    ).rows as { aid: number; abalance: number }[];
    return { branches, changedAccounts: new Map(rows.map((r) => [r.aid, r.abalance])) };
  } finally {
    await client.end();
  }
}

/** What {@link verifyBank} found: mismatches (one line each; empty when all match) and counts. */
export interface BankVerdict {
  mismatches: string[];
  branches: number;
  changedAccounts: number;
}

/**
 * Reads the newest value per key of a service's output queue: {@link latestByKey}, or another
 * reader (the bounded soak's, faults/bank.ts, starts at the newest snapshot because retention
 * deletes the oldest outputs).
 */
export type LatestByKeyReader = <T>(topology: Topology, queue: string) => Map<string, T>;

/**
 * Compares the services' newest outputs with the database (see the file comment). Run it once
 * the topology has drained (every staged change shipped and processed). `latest` reads the
 * outputs (default {@link latestByKey}: the whole output queue).
 */
export async function verifyBank(
  topology: Topology,
  latest: LatestByKeyReader = latestByKey,
): Promise<BankVerdict> {
  const branchTotals = latest<{ bid: number; total: number }>(topology, 'branch-balances-out');
  const accountBalances = latest<{ aid: number; abalance: number }>(topology, 'accounts-out');
  const { branches, changedAccounts } = await readBankBalances(topology);
  const mismatches: string[] = [];
  for (const b of branches) {
    const seen = branchTotals.get(String(b.bid))?.total ?? 0;
    if (seen !== b.bbalance)
      mismatches.push(
        `branch ${b.bid}: service total ${seen} != pgbench_branches.bbalance ${b.bbalance}`,
      );
  }
  for (const [aid, v] of accountBalances) {
    const dbValue = changedAccounts.get(v.aid) ?? 0;
    if (v.abalance !== dbValue)
      mismatches.push(
        `account ${aid}: service abalance ${v.abalance} != pgbench_accounts.abalance ${dbValue}`,
      );
  }
  for (const [aid, abalance] of changedAccounts) {
    if (!accountBalances.has(String(aid)))
      mismatches.push(
        `account ${aid}: changed in the database (abalance ${abalance}) but never seen by the service`,
      );
  }
  return { mismatches, branches: branches.length, changedAccounts: changedAccounts.size };
}
