/**
 * positions: per-instrument positions from trade events (queue `trades`, JSON
 * `{ instrument, qty, price }`, qty signed, price in integer cents) and periodic update events
 * (queue `position-timer`, appended by the runtime every `settings.timerIntervalMs`; each one
 * counts a tick). Every change writes the full position list to the output:
 * `{ trades, ticks, positions: [instrument, qty, cost][] }` (sorted by instrument; cost = sum of
 * qty * price), keyed by the instrument traded or `timer`.
 *
 * Because every output holds the whole state, `replayOutput` rebuilds it from the newest output
 * alone (inputsReplay OUTPUT_REVERSE). The same module runs with INPUTS and OUTPUT;
 * positions-snapshot.ts adds snapshots.
 */
import { defineService, type ServiceEvent } from 'sluice/service';

export interface PositionsState {
  /** instrument -> [qty, cost] */
  positions: Map<string, [number, number]>;
  trades: number;
  ticks: number;
}

/** One output (and snapshot) body: the whole state. */
export interface PositionsOutput {
  trades: number;
  ticks: number;
  positions: [string, number, number][];
}

export function toOutput(s: PositionsState): PositionsOutput {
  const positions = [...s.positions.entries()]
    .sort((a, b) => (a[0] < b[0] ? -1 : 1))
    .map(([i, [q, c]]) => [i, q, c] as [string, number, number]);
  return { trades: s.trades, ticks: s.ticks, positions };
}

export function fromOutput(o: PositionsOutput): PositionsState {
  return {
    trades: o.trades,
    ticks: o.ticks,
    positions: new Map(o.positions.map(([i, q, c]) => [i, [q, c]])),
  };
}

export const positions = defineService<PositionsState>({
  init: () => ({ positions: new Map(), trades: 0, ticks: 0 }),
  handlers: {
    json(state, event: ServiceEvent, ctx) {
      const t = event.json<{ instrument: string; qty: number; price: number }>();
      const p = state.positions.get(t.instrument) ?? [0, 0];
      p[0] += t.qty;
      p[1] += t.qty * t.price;
      state.positions.set(t.instrument, p);
      state.trades++;
      ctx.emit(t.instrument, toOutput(state));
    },
  },
  onTimer(state, _event, ctx) {
    state.ticks++;
    ctx.emit('timer', toOutput(state));
  },
  replayOutput(state, event) {
    if (event.type !== 2) return false;
    Object.assign(state, fromOutput(event.json<PositionsOutput>()));
    return true;
  },
});

export default positions;
