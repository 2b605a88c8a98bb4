/**
 * startFrom strategies: where a service's readers start live reading of one input partition
 * once the state is built. Small policy objects in the manner of engine/ring/idle.ts, one per
 * topology value, chosen by {@link startFromStrategy}; the same on both buses (the end comes
 * from the partition's tailer: the journal's next index, Kafka's last stable offset).
 */

/** What a strategy knows about one input partition at the end of the restart. */
export interface StartFromInput {
  /** LAST_WRITTEN: the last input index whose effect is durable in the output (-1: none). */
  lastWritten: number;
  /**
   * The state was rebuilt (a replay, a snapshot or a key-value store): the replay was the pass
   * through LAST_WRITTEN, so live reading continues after it.
   */
  rebuilt: boolean;
  /** The partition's end now (index the next appended record gets); read only by END. */
  end(): number;
}

/** One startFrom value. */
export interface StartFromStrategy {
  readonly name: 'START' | 'LAST_WRITTEN' | 'END';
  /** First index the reader delivers. */
  from(input: StartFromInput): number;
}

/**
 * START: every input from the first one, for real, when nothing rebuilt the state; with a rebuilt
 * state (Chronicle Services' startFrom START with inputsReplay INPUTS) after LAST_WRITTEN.
 */
const START: StartFromStrategy = {
  name: 'START',
  from: (i) => (i.rebuilt ? i.lastWritten + 1 : 0),
};

/** LAST_WRITTEN: after the last input whose effect is durable (exactly once across restarts). */
const LAST_WRITTEN: StartFromStrategy = {
  name: 'LAST_WRITTEN',
  from: (i) => i.lastWritten + 1,
};

/** END: only what is appended after the start; what was there is skipped. */
const END: StartFromStrategy = {
  name: 'END',
  from: (i) => i.end(),
};

/** Every startFrom strategy by its topology name. */
export const START_FROM_STRATEGIES: Readonly<Record<StartFromStrategy['name'], StartFromStrategy>> =
  {
    START,
    LAST_WRITTEN,
    END,
  };

/**
 * The strategy of a topology's `startFrom` value.
 * @throws Error naming the value and the allowed ones (a programmer error: config validates it).
 */
export function startFromStrategy(name: string): StartFromStrategy {
  const s = (START_FROM_STRATEGIES as Record<string, StartFromStrategy | undefined>)[name];
  if (!s)
    throw new Error(
      `startFrom must be one of ${Object.keys(START_FROM_STRATEGIES).join(', ')}, startFrom=${name}`,
    );
  return s;
}
