import { createMemoryBus } from '../engine/bus/index.js'
import { busConformance } from './bus-conformance.js'

busConformance('memory', async () => createMemoryBus())
