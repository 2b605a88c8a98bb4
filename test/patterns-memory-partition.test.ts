/**
 * The pattern conformance suite on the memory bus with the durable pattern's 'partition' fencing
 * (one transactional producer per input partition, the kafka default): the memory bus shows what
 * the kafka mock cannot (aborted records and open transactions invisible, transactional offsets
 * stored), so exactly once under a crash and a failed commit are verified for that mode here.
 */
import { createMemoryBus } from '../engine/bus/index.js';
import { patternConformance } from './patterns-conformance.js';

patternConformance('memory, partition fencing', async () => ({ bus: createMemoryBus() }), {
  durableFencing: 'partition',
});
