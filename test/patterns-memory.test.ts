import { createMemoryBus } from '../engine/bus/index.js';
import { patternConformance } from './patterns-conformance.js';

patternConformance('memory', async () => ({ bus: createMemoryBus() }));
