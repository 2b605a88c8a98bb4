/**
 * The bus conformance suite on engine/bus/remote: a journal bus served over a MessagePort
 * (serveBus) and used through connectBus, as every processor actor of a topology uses the
 * topology's journal bus. Both ends are in this thread here; the suite checks the protocol
 * (consumer state copies, seek/pause order, rebalance callbacks inside poll, errors with their
 * codes), test/patterns-actors-journal.test.ts the same over a real worker boundary.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MessageChannel } from 'node:worker_threads';
import { connectBus, createJournalBus, serveBus, type BusBackend } from '../engine/bus/index.js';
import { busConformance } from './bus-conformance.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_bus-remote-'));
let n = 0;

busConformance(
  'journal, through engine/bus/remote',
  async (): Promise<BusBackend> => {
    const owner = await createJournalBus({ dir: path.join(root, `bus-${++n}`), fsync: 'none' });
    const { port1, port2 } = new MessageChannel();
    const serving = serveBus(owner, port1);
    const client = connectBus(port2, 'journal');
    return Object.assign(Object.create(client) as BusBackend, client, {
      close: async () => {
        await client.close();
        await serving.close();
        await owner.close();
      },
    });
  },
  { after: async () => fs.rmSync(root, { recursive: true, force: true }) },
);
