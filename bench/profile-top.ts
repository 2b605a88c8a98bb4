/**
 * Summarizes V8 CPU profiles (`node --cpu-prof --cpu-prof-dir DIR ...`, one .cpuprofile per
 * thread) as the top self-time functions of each, for bench/RESULTS.md (issue 12, target 7).
 *
 *   node dist/bench/profile-top.js DIR [top]        (default top 12)
 *
 * Self time of a function = samples whose top frame is it x the sampling interval; "(idle)"
 * and "(program)" are V8's, "(garbage collector)" is GC. A thread is named by the script that
 * its profile spends most time in (the worker entry), since file names only carry thread ids.
 */
import fs from 'node:fs';
import path from 'node:path';
import { isMainModule } from './lib/report.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** One thread's profile: total ms, busy ms (not idle), top functions by self ms. */
export interface ProfileSummary {
  file: string;
  thread: string;
  totalMs: number;
  busyMs: number;
  top: { name: string; selfMs: number; pctOfBusy: number }[];
}

function label(n: ProfileNode): string {
  const f = n.callFrame;
  const name = f.functionName || '(anonymous)';
  if (!f.url) return name;
  const file = f.url
    .replace(/^file:\/\//, '')
    .replace(/^.*\/dist\//, '')
    .replace(/^node:/, 'node:');
  return `${name} ${path.basename(file)}:${f.lineNumber + 1}`;
}

/** Reads one .cpuprofile and returns its summary. */
export function summarizeProfile(file: string, topN = 12): ProfileSummary {
  const p = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<string, number>();
  const byUrl = new Map<string, number>();
  let total = 0;
  let idle = 0;
  for (let i = 0; i < p.samples.length; i++) {
    const n = byId.get(p.samples[i])!;
    const dt = p.timeDeltas[i] ?? 0;
    total += dt;
    const name = label(n);
    if (n.callFrame.functionName === '(idle)') idle += dt;
    selfUs.set(name, (selfUs.get(name) ?? 0) + dt);
    const url = n.callFrame.url;
    if (url.includes('/dist/') && !url.includes('/engine/'))
      byUrl.set(url, (byUrl.get(url) ?? 0) + dt);
  }
  const busy = total - idle;
  const thread =
    [...byUrl.entries()].sort((a, b) => b[1] - a[1])[0]?.[0].replace(/^.*\/dist\//, '') ??
    '(engine only)';
  const top = [...selfUs.entries()]
    .filter(([name]) => name !== '(idle)')
    .sort((a, b) => b[1] - a[1])
    .slice(0, topN)
    .map(([name, us]) => ({
      name,
      selfMs: us / 1000,
      pctOfBusy: busy > 0 ? (100 * us) / busy : 0,
    }));
  return { file: path.basename(file), thread, totalMs: total / 1000, busyMs: busy / 1000, top };
}

/** Markdown: one table per profile in `dir`. */
export function profilesMarkdown(dir: string, topN = 12): string {
  const out: string[] = [];
  for (const f of fs
    .readdirSync(dir)
    .filter((x) => x.endsWith('.cpuprofile'))
    .sort()) {
    const s = summarizeProfile(path.join(dir, f), topN);
    if (s.busyMs < 50) continue;
    out.push(
      `#### ${s.thread} (${s.file}): ${s.busyMs.toFixed(0)} ms busy of ${s.totalMs.toFixed(0)} ms`,
      '',
      '| function | self ms | % of busy |',
      '|---|---:|---:|',
      ...s.top.map(
        (t) =>
          `| ${t.name.replace(/\|/g, '\\|')} | ${t.selfMs.toFixed(0)} | ${t.pctOfBusy.toFixed(1)} |`,
      ),
      '',
    );
  }
  return out.join('\n');
}

if (isMainModule(import.meta.url)) {
  const dir = process.argv[2];
  if (!dir) throw new Error('usage: node dist/bench/profile-top.js DIR [top]');
  console.log(profilesMarkdown(dir, Number(process.argv[3] ?? 12)));
}
