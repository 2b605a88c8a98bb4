/**
 * examples/bank/services/branch-balances.ts with snapshots, for the bounded soak (faults/soak.ts
 * `--bounded`): the same handlers, and every `settings.snapshotEveryInputs` inputs the state (the
 * running total per branch) is written to the output queue as events of type
 * {@link BRANCH_BALANCES_SNAPSHOT_TYPE}, so a restart replays only the inputs after it.
 */
import { defineService } from 'sluice/service';
import branchBalances from '../../examples/bank/services/branch-balances.js';

/** Envelope type of the branch-balances service's snapshot chunks. */
export const BRANCH_BALANCES_SNAPSHOT_TYPE = 202;

/** The state of examples/bank/services/branch-balances.ts. */
interface State {
  totals: Map<string, number>;
}

/** A snapshot as bytes: JSON of the `[bid, total]` pairs. */
export function writeBranchBalancesSnapshot(state: State): Uint8Array {
  return new TextEncoder().encode(JSON.stringify([...state.totals]));
}

/** The state back from {@link writeBranchBalancesSnapshot}'s bytes. */
export function readBranchBalancesSnapshot(bytes: Uint8Array): State {
  return { totals: new Map(JSON.parse(new TextDecoder().decode(bytes)) as [string, number][]) };
}

export default defineService<State>({
  ...branchBalances,
  snapshot: {
    type: BRANCH_BALANCES_SNAPSHOT_TYPE,
    write: writeBranchBalancesSnapshot,
    restore: (bytes) => readBranchBalancesSnapshot(bytes),
  },
});
