import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

// Compiled to dist/test/, so the repository root is two levels up.
const root = fileURLToPath(new URL('../../', import.meta.url));
const committedDir = join(root, 'schemas', 'generated');

function listFiles(dir: string): string[] {
  const files: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) files.push(...listFiles(path));
    else files.push(path);
  }
  return files;
}

const flatc = spawnSync('flatc', ['--version'], { encoding: 'utf8' });
const flatcVersion = flatc.status === 0 ? flatc.stdout.trim() : null;

if (flatcVersion === null) {
  console.log('SKIPPED schema drift test: flatc is not installed (CI installs flatc 2.0.8)');
} else {
  test('schemas/generated matches what schemas/generate.sh produces from schemas/sluice.fbs', () => {
    const tmp = mkdtempSync(join(tmpdir(), 'sluice-schemas-'));
    const outDir = join(tmp, 'generated');
    try {
      execFileSync('bash', [join(root, 'schemas', 'generate.sh'), outDir], { stdio: 'pipe' });
      const fresh = listFiles(outDir).map((f) => relative(outDir, f));
      const committed = listFiles(committedDir).map((f) => relative(committedDir, f));
      const hint = `regenerate with "npm run schemas" and commit (committed code is from flatc 2.0.8; found ${flatcVersion})`;
      assert.equal(committed, fresh, `file list differs: ${hint}`);
      for (const file of fresh) {
        const want = readFileSync(join(outDir, file), 'utf8');
        const have = readFileSync(join(committedDir, file), 'utf8');
        assert.ok(have === want, `schemas/generated/${file} is stale: ${hint}`);
      }
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
}

test.run();
