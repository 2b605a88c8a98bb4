/**
 * The kill -9 cases of test/replay-crash-cases.ts (issue 3: every restart strategy, 50 kills in
 * all) on the embedded journal.
 * test-timeout-s: 600 (a kill -9 loop: each restart waited out)
 */
import { test } from 'uvu';
import { crashTests } from './replay-crash-cases.js';
import { journalBackend } from './lib/backends.js';

crashTests('journal', async () => journalBackend());

test.run();
