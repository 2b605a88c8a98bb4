/**
 * Builds a Java peer's Maven project under bench/peers/ (once: cached until its pom or a source
 * file changes) and returns the classpath to run it with. The jars stay in the local Maven
 * repository (~/.m2); only target/ is written in the project.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The repository root (this file runs as dist/bench/peers/maven.js). */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/** Newest modification time (ms) of the pom and every file under src/. */
function sourcesMtimeMs(projectDir: string): number {
  let newest = statSync(join(projectDir, 'pom.xml')).mtimeMs;
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else newest = Math.max(newest, statSync(path).mtimeMs);
    }
  };
  walk(join(projectDir, 'src'));
  return newest;
}

/**
 * `mvn -q -B compile dependency:build-classpath` in bench/peers/<name> unless target/ is newer
 * than every source; returns `target/classes` + the dependency classpath (absolute paths,
 * ':'-separated). Throws Error with Maven's output when the build fails.
 */
export async function buildPeer(name: string): Promise<string> {
  const projectDir = join(REPO_ROOT, 'bench', 'peers', name);
  const cpFile = join(projectDir, 'target', 'classpath.txt');
  const fresh = existsSync(cpFile) && statSync(cpFile).mtimeMs > sourcesMtimeMs(projectDir);
  if (!fresh) {
    try {
      await run(
        'mvn',
        [
          '-q',
          '-B',
          'compile',
          'dependency:build-classpath',
          '-Dmdep.outputFile=target/classpath.txt',
        ],
        { cwd: projectDir, maxBuffer: 64 << 20 },
      );
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message: string };
      throw new Error(
        `building bench/peers/${name} with Maven failed: ${e.message}\n` +
          `${e.stdout ?? ''}${e.stderr ?? ''}`,
      );
    }
  }
  return `${join(projectDir, 'target', 'classes')}:${readFileSync(cpFile, 'utf8').trim()}`;
}
