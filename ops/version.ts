/** The package's version, read once from its package.json (two levels above dist/ops/). */
import fs from 'node:fs';
import path from 'node:path';

let cached: string | null = null;

/** The `version` field of Sluice's package.json. */
export function packageVersion(): string {
  if (cached !== null) return cached;
  const here = path.dirname(new URL(import.meta.url).pathname);
  for (const dir of [path.join(here, '..', '..'), path.join(here, '..')]) {
    const file = path.join(dir, 'package.json');
    if (!fs.existsSync(file)) continue;
    const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: string; version?: string };
    if (pkg.name === 'sluice' && typeof pkg.version === 'string') return (cached = pkg.version);
  }
  return (cached = '0.0.0');
}
