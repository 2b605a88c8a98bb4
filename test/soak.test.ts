/**
 * The soak's pieces that run without a soak (faults/soak.ts, faults/bank-snapshots/): the bounded
 * bank services' snapshots give back the state they were written from, and `--charts-from`
 * recomputes summary.json (the quarters' means, the verdict) and renders the charts from an
 * existing samples.csv.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { writeAccountsSnapshot, readAccountsSnapshot } from '../faults/bank-snapshots/accounts.js';
import {
  writeBranchBalancesSnapshot,
  readBranchBalancesSnapshot,
} from '../faults/bank-snapshots/branch-balances.js';
import { REPO_ROOT } from '../faults/harness.js';

test('the bounded bank services restore the state their snapshot was written from', () => {
  const balances = new Map([
    ['1', '-4070'],
    ['99999', '12'],
    ['5', '0'],
  ]);
  assert.equal(
    [...readAccountsSnapshot(writeAccountsSnapshot({ balances })).balances],
    [...balances],
  );
  const totals = new Map([
    ['1', 123456],
    ['2', -7],
  ]);
  assert.equal(
    [...readBranchBalancesSnapshot(writeBranchBalancesSnapshot({ totals })).totals],
    [...totals],
  );
  assert.equal(
    readAccountsSnapshot(writeAccountsSnapshot({ balances: new Map() })).balances.size,
    0,
  );
});

test('--charts-from: summary.json and the charts from an existing samples.csv', () => {
  // The charts are rendered by the Debian package's Chromium (never a downloaded one).
  if (!fs.existsSync('/usr/bin/chromium')) {
    process.stdout.write('\n  skipped: no /usr/bin/chromium\n');
    return;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'soak-charts-'));
  try {
    // 4 minutes, a sample every 10 s: rss 100 MiB in the second quarter, 105 in the last (+5%),
    // fds 50 then 60 (+10), disk 10 then 30 MiB (+200%), lag 0 then 7; one sample without lag.
    const lines = ['t_s,pid,rss_mib,fds,disk_mib,lag_records'];
    for (let t = 10; t <= 240; t += 10) {
      const late = t >= 180;
      lines.push(
        `${t},${t < 120 ? 11 : 12},${late ? 105 : 100},${late ? 60 : 50},${late ? 30 : 10},${t === 200 ? '' : late ? 7 : 0}`,
      );
    }
    fs.writeFileSync(path.join(dir, 'samples.csv'), lines.join('\n') + '\n');
    const out = execFileSync(
      process.execPath,
      [path.join(REPO_ROOT, 'dist/faults/soak.js'), '--charts-from', dir, '--minutes', '4'],
      { encoding: 'utf8' },
    );
    assert.match(out, /RSS 100 -> 105 MiB \(\+5\.0%/);
    const s = JSON.parse(fs.readFileSync(path.join(dir, 'summary.json'), 'utf8'));
    assert.is(s.samples, 24);
    assert.is(s.pids, 2);
    assert.is(s.faults, null);
    assert.is(s.rssMiB.secondQuarterMean, 100);
    assert.is(s.rssMiB.lastQuarterMean, 105);
    assert.is(s.fds.drift, 10);
    assert.is(s.diskMiB.growth, 2);
    assert.is(s.diskMiB.judged, false);
    assert.is(s.lagRecords.lastQuarterMean, 7);
    assert.is(s.flat, true); // +5% rss, +10 descriptors; disk not judged without --bounded
    for (const c of ['rss', 'fds', 'disk', 'lag'])
      assert.ok(fs.statSync(path.join(dir, `${c}.png`)).size > 1000, `${c}.png`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
