/**
 * positions with snapshots: the same handlers as positions.ts, plus a snapshot of the whole
 * state (JSON, event type 200) every `settings.snapshotEveryInputs` inputs (default 5000).
 * A restart restores the newest snapshot and replays only the inputs after it.
 */
import { defineService } from 'sluice/service';
import {
  positions,
  toOutput,
  fromOutput,
  type PositionsState,
  type PositionsOutput,
} from './positions.js';

export default defineService<PositionsState>({
  init: positions.init,
  handlers: positions.handlers,
  onTimer: positions.onTimer,
  snapshot: {
    type: 200,
    everyInputs: 5000,
    write: (state) => new TextEncoder().encode(JSON.stringify(toOutput(state))),
    restore: (bytes) => fromOutput(JSON.parse(new TextDecoder().decode(bytes)) as PositionsOutput),
  },
});
