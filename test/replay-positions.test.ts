/**
 * Runs examples/positions once per restart strategy (INPUTS, OUTPUT, OUTPUT_REVERSE,
 * snapshots, key-value store): three rounds of trades, with runtime timer events, and a stop and
 * a restart between them; the example exits 0 only when the service's state equals positions
 * recomputed from the inputs.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';

const main = new URL('../examples/positions/main.js', import.meta.url).pathname;
const repoRoot = path.resolve(path.dirname(main), '../../..');

function runExample(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [main, ...args], {
      cwd: repoRoot,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (b) => (stdout += b));
    p.stderr.on('data', (b) => (stderr += b));
    p.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

for (const strategy of ['inputs', 'output', 'output-reverse', 'snapshots', 'kv-store']) {
  test(`examples/positions with topology.${strategy}.yaml: after two restarts the positions equal the reference`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-positions-'));
    try {
      const r = await runExample(
        [
          '--topology',
          `examples/positions/topology.${strategy}.yaml`,
          '--trades',
          '3000',
          '--rounds',
          '3',
          '--fresh',
        ],
        {
          POSITIONS_DATA: dir,
          SNAPSHOT_EVERY: '1000',
          TIMER_MS: '10',
        },
      );
      assert.is(r.code, 0, `exit ${r.code}\n${r.stdout}\n${r.stderr}`);
      const result = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
        rounds: number;
        trades: number;
        match: boolean;
        restartMs: number[];
      };
      assert.is(result.match, true);
      assert.is(result.trades, 9000);
      assert.is(result.restartMs.length, 3);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test.run();
