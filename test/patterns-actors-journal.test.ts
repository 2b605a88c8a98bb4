/**
 * The pattern conformance suite with its processors run as actors from a topology file
 * (`processors:` entries, each in its own worker thread under a Supervisor) on the journal bus:
 * the test's bus is the one instance, served to the worker over a MessagePort (engine/bus/remote),
 * as startTopology serves the topology's `<dataDir>/bus`.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createJournalBus } from '../engine/bus/index.js';
import { patternConformance } from './patterns-conformance.js';
import { actorRunner } from './patterns-runners.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_patterns-actors-'));
let n = 0;

patternConformance(
  'journal',
  async () => {
    const dir = path.join(root, `bus-${++n}`);
    return {
      bus: await createJournalBus({ dir, fsync: 'none' }),
      reopen: () => createJournalBus({ dir, fsync: 'none' }),
      crashChild: { kind: 'journal', dir },
    };
  },
  { runner: actorRunner(), after: async () => fs.rmSync(root, { recursive: true, force: true }) },
);
