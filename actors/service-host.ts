/**
 * Service host actor (worker entry): imports the service module named in its start data and runs
 * it with engine/service's host (engine/service/host.ts: the restart strategies, the replay and
 * the live loop; its start protocol and exactness argument are documented there).
 */
import { pathToFileURL } from 'node:url';
import { runActor, type ActorContext } from '../engine/actor/index.js';
import {
  assertServiceDefinition,
  runServiceHost,
  type ServiceDefinition,
} from '../engine/service/index.js';
import type { ServiceHostData } from './contracts.js';

runActor<ServiceHostData>(async (ctx: ActorContext<ServiceHostData>) => {
  const mod: unknown = await import(pathToFileURL(ctx.data.moduleFile).href);
  const def: ServiceDefinition = assertServiceDefinition(mod, ctx.data.moduleFile);
  return runServiceHost(ctx, def);
});
