/** The pattern conformance suite on the journal backend; the crash test kills a child process (kill -9). */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createJournalBus } from '../engine/bus/index.js'
import { patternConformance } from './patterns-conformance.js'

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-patterns-journal-'))
let n = 0

patternConformance('journal', async () => {
  const dir = path.join(root, `bus-${++n}`)
  return { bus: await createJournalBus({ dir, fsync: 'none' }), reopen: () => createJournalBus({ dir, fsync: 'none' }), crashChild: { kind: 'journal', dir } }
}, { after: async () => fs.rmSync(root, { recursive: true, force: true }) })
