/**
 * The journal pump sink's crash reconciliation (PumpSink.recentStagingIds on the journal; the
 * sink itself is the pump actor's, actors/cdc-pump.ts): which staged changes of the last batch
 * the target partitions already hold, read from their ends backwards.
 *
 * The window is the last `limit` staged changes of each partition, not its last `limit` records:
 * an initial load's read events (staging id "") are appended after the claimed changes of the
 * same cycle, and before that cycle's ack (engine/cdc/pump.ts, loadCycle), as many as a chunk has
 * rows of the pump's keys (CDC_DEFAULTS.loadChunkRows). Counted, they pushed the unacked changes
 * out of a window of batchSizeMax * pumps records, so a kill -9 between append and ack appended
 * them again (staging id 572 twice in test/cdc-initial-load-crash, PostgreSQL).
 */
import { Tailer } from '../journal/index.js';
import { EnvelopeView, decodeChange, EVENT_TYPE_CHANGE } from '../codec/index.js';

/**
 * Staging ids of those of the last `limit` staged changes of each journal partition in `dirs`
 * that carry installation id `installationId` (none when it is ''). Records that are not change
 * events, and read events of initial loads, are skipped and not counted.
 * @throws Error when `limit` is not an integer >= 1.
 */
export function recentStagingIdsInJournal(
  dirs: readonly string[],
  limit: number,
  installationId: string,
): Set<string> {
  if (!Number.isInteger(limit) || limit < 1)
    throw new Error(`limit must be an integer >= 1, limit=${limit}`);
  const ids = new Set<string>();
  const view = new EnvelopeView();
  for (const dir of dirs) {
    const tailer = Tailer.open({ dir });
    try {
      tailer.moveToEnd();
      let counted = 0;
      while (counted < limit) {
        const rec = tailer.previous();
        if (!rec) break;
        view.wrap(rec.bytes, 0, rec.bytes.length);
        if (view.type !== EVENT_TYPE_CHANGE) continue;
        const ch = decodeChange(view.payload);
        if (ch.stagingId === '') continue;
        counted++;
        // Only this installation's records: a recreated staging table reuses staging ids.
        if (installationId !== '' && ch.installation === installationId) ids.add(ch.stagingId);
      }
    } finally {
      tailer.close();
    }
  }
  return ids;
}
