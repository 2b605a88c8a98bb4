/**
 * The checks of a topology's modules, main-side, before anything starts: each service module's
 * definition against its restart strategy (serviceModuleProblems), the warnings of a service that
 * would drop capture events (serviceWarnings), and each processor's handler module against its
 * pattern (processorModuleProblems). Used by `sluice check` and `startTopology`.
 */
import { pathToFileURL } from 'node:url';
import { assertServiceDefinition, replayProblems } from '../engine/service/index.js';
import {
  ConfigError,
  formatProblem,
  problemAt,
  syntaxErrorText,
  type ConfigProblem,
  type Topology,
} from '../engine/config/index.js';

/** A service entry of a topology file, as far as its module check needs it. */
export interface ServiceModuleEntry {
  /** Position in `services`. */
  index: number;
  name: string;
  /** The JavaScript file to import (resolved, see engine/config resolveModule). */
  module: string;
  inputsReplay: string;
  settings: Record<string, unknown>;
}

/**
 * Imports each service module (in this thread) and checks its definition: a default export made
 * with defineService, and support for its configured restart strategy (engine/service
 * replayProblems: OUTPUT_REVERSE needs `replayOutput`, a declared `snapshot` needs its `type`,
 * `write` and `restore`, `settings.snapshotEveryInputs` needs a snapshot, ...).
 * @returns one problem each, at the topology field it is about (`services[i].inputsReplay`,
 *   `services[i].settings.x`), or at `services[i].module` for the module and its definition.
 */
export async function serviceModuleProblems(
  file: string,
  entries: readonly ServiceModuleEntry[],
): Promise<ConfigProblem[]> {
  const problems: ConfigProblem[] = [];
  for (const s of entries) {
    let def;
    try {
      def = assertServiceDefinition(await import(pathToFileURL(s.module).href), s.module);
    } catch (err) {
      // A syntax error is named with its file and line:col (Node's own message names neither).
      const located = await syntaxErrorText(s.module, err);
      const message = `service "${s.name}": ${located ?? (err as Error).message}`;
      problems.push(problemAt(file, ['services', s.index, 'module'], message));
      continue;
    }
    const cfg = { service: s.name, inputsReplay: s.inputsReplay, settings: s.settings };
    for (const [field, message] of replayProblems(def, cfg)) {
      const at =
        field === 'inputsReplay'
          ? ['inputsReplay']
          : field.startsWith('settings.')
            ? ['settings', field.slice('settings.'.length)]
            : ['module'];
      problems.push(problemAt(file, ['services', s.index, ...at], `${message} (${s.module})`));
    }
  }
  return problems;
}

/** The module check's view of a loaded topology's services. */
export function serviceModuleEntries(topology: Topology): ServiceModuleEntry[] {
  return topology.services.map((s, index) => ({
    index,
    name: s.name,
    module: s.module,
    inputsReplay: s.inputsReplay,
    settings: s.settings,
  }));
}

/**
 * {@link serviceModuleProblems} for a loaded topology. Call it after loadTopology and before
 * startTopology to fail at load instead of in a restarting worker (the service host runs the
 * same check and fails its start with the same message).
 * @throws ConfigError listing every problem, one line each:
 *   `<file>:17:19: services[1].inputsReplay: service "positions": inputsReplay OUTPUT_REVERSE ...`
 */
export async function checkServiceModules(topology: Topology): Promise<void> {
  const problems = await serviceModuleProblems(topology.file, serviceModuleEntries(topology));
  if (problems.length > 0) throw new ConfigError(problems);
}

/**
 * Problems of a topology that are not errors, one line each as `file:line:col: path: warning: ...`:
 * a service reading a capture target queue (capture writes change events, type 1) whose
 * definition has no `change` handler would drop every change without a trace. One line per such
 * service input. Loads the service modules (in this thread); a module that does not load is left
 * to checkServiceModules.
 */
export async function serviceWarnings(topology: Topology): Promise<string[]> {
  const captureOf = new Map<string, string>();
  for (const c of topology.capture) for (const t of c.tables) captureOf.set(t.target, c.name);
  const lines: string[] = [];
  for (const [i, s] of topology.services.entries()) {
    const fed = s.inputs
      .map((q, j) => [q, j, captureOf.get(q)] as const)
      .filter(([, , c]) => c !== undefined);
    if (fed.length === 0) continue;
    let def;
    try {
      def = assertServiceDefinition(await import(pathToFileURL(s.module).href), s.module);
    } catch {
      continue;
    }
    if (def.handlers.change) continue;
    for (const [queue, j, capture] of fed) {
      lines.push(
        formatProblem(
          problemAt(
            topology.file,
            ['services', i, 'inputs', j],
            `warning: service "${s.name}" has no change handler: the change events capture source "${capture}" writes to queue "${queue}" would be dropped (add handlers.change to ${s.module})`,
          ),
        ),
      );
    }
  }
  return lines;
}

/** What each pattern's handler must have (the processor object the pattern library takes). */
const HANDLER_METHODS: Readonly<Record<string, readonly string[]>> = {
  durable: ['onNext'],
  'state-and-event': ['onNext'],
  pubsub: ['onNext'],
  compacted: ['onSnapshot', 'onNext'],
  rpc: ['onRequest'],
};

/**
 * Imports each processor's handler module (in this thread) and checks its default export: a
 * processor object with the pattern's handler functions (durable `onNext`, compacted
 * `onSnapshot` and `onNext`, rpc `onRequest`, ...), or a function (a factory, called only by the
 * processor actor with its context). @returns one problem per module, at `processors[i].module`.
 */
export async function processorModuleProblems(topology: Topology): Promise<ConfigProblem[]> {
  const problems: ConfigProblem[] = [];
  for (const [i, p] of topology.processors.entries()) {
    const at = (message: string) =>
      problems.push(
        problemAt(topology.file, ['processors', i, 'module'], `processor "${p.name}": ${message}`),
      );
    let exported: unknown;
    try {
      exported = ((await import(pathToFileURL(p.module).href)) as { default?: unknown }).default;
    } catch (err) {
      const located = await syntaxErrorText(p.module, err);
      at(located ?? `cannot import ${p.module}: ${(err as Error).message}`);
      continue;
    }
    if (typeof exported === 'function') continue;
    if (typeof exported !== 'object' || exported === null) {
      at(
        `${p.module} must export default a ${p.pattern} processor object or a function returning one, got ${exported === null ? 'null' : typeof exported}`,
      );
      continue;
    }
    const missing = HANDLER_METHODS[p.pattern]!.filter(
      (m) => typeof (exported as Record<string, unknown>)[m] !== 'function',
    );
    if (missing.length > 0)
      at(
        `the ${p.pattern} processor exported by ${p.module} has no ${missing.join(' and ')} function`,
      );
  }
  return problems;
}

/**
 * {@link processorModuleProblems} as a check: call it after loadTopology, before startTopology.
 * @throws ConfigError listing every problem, one line each.
 */
export async function checkProcessorModules(topology: Topology): Promise<void> {
  const problems = await processorModuleProblems(topology);
  if (problems.length > 0) throw new ConfigError(problems);
}
