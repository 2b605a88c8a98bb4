/**
 * engine/bus/remote: one bus shared by several worker threads of a process. The thread that
 * opened the bus serves it on a MessagePort per client ({@link serveBus}); a worker uses
 * {@link connectBus} as its BusBackend. For the journal bus, which one instance per directory
 * may open: every processor actor of a topology reaches the topology's journal bus this way.
 */
export { serveBus, type BusServing } from './server.js';
export { connectBus } from './client.js';
