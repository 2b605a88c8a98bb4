/**
 * examples/bank/services/accounts.ts with snapshots, for the bounded soak (faults/soak.ts
 * `--bounded`): the same handlers, and every `settings.snapshotEveryInputs` inputs the state
 * (the latest abalance per account) is written to the output queue as events of type
 * {@link ACCOUNTS_SNAPSHOT_TYPE}, so a restart replays only the inputs after the newest snapshot,
 * not the whole history, and retention can delete the inputs before it.
 */
import { defineService } from 'sluice/service';
import accounts from '../../examples/bank/services/accounts.js';

/** Envelope type of the accounts service's snapshot chunks. */
export const ACCOUNTS_SNAPSHOT_TYPE = 201;

/** The state of examples/bank/services/accounts.ts. */
interface State {
  balances: Map<string, string>;
}

/** A snapshot as bytes: JSON of the `[aid, abalance]` pairs (both the change image's text). */
export function writeAccountsSnapshot(state: State): Uint8Array {
  return new TextEncoder().encode(JSON.stringify([...state.balances]));
}

/** The state back from {@link writeAccountsSnapshot}'s bytes. */
export function readAccountsSnapshot(bytes: Uint8Array): State {
  return { balances: new Map(JSON.parse(new TextDecoder().decode(bytes)) as [string, string][]) };
}

export default defineService<State>({
  ...accounts,
  snapshot: {
    type: ACCOUNTS_SNAPSHOT_TYPE,
    write: writeAccountsSnapshot,
    restore: (bytes) => readAccountsSnapshot(bytes),
  },
});
