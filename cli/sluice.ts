#!/usr/bin/env node
/**
 * Entry of the `sluice` command line (the commands are in commands.ts). It installs the
 * SIGINT/SIGTERM listeners first and only then loads the rest, so an early Ctrl-C of
 * `sluice run` still leads to a clean stop (exit 0) rather than the default exit 130.
 */
import { installStopSignals } from './signals.js';

installStopSignals({ defer: process.argv[2] === 'run' });
await import('./commands.js');
