/**
 * Commands that read a topology's queues as embedded journal files refuse a kafka bus, naming
 * the topology file, instead of printing stale local files or nothing with exit 0 (a new user
 * ran `sluice tail` on the bank's Kafka topology after a journal run and got the journal's old
 * records): `sluice tail` (one partition and -a) and `sluice dlq list|replay|purge`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sluice } from './lib/cli.js';

const service = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;

test('sluice tail and sluice dlq refuse a kafka bus, naming the file; nothing is printed on stdout', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-kafka-only-'));
  try {
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: konly\ndataDir: ./data\nbus: { kind: kafka, brokers: [127.0.0.1:1] }\nqueues:\n  - { name: orders }\n  - { name: priced }\nservices:\n  - { name: pricer, module: ${service}, inputs: [orders], output: priced }\n`,
    );
    // Stale journal files where a journal run of the same file would have left them.
    fs.mkdirSync(path.join(dir, 'data', 'queues', 'priced', '0'), { recursive: true });
    for (const args of [
      ['tail', file, 'priced'],
      ['tail', file, 'priced', '-a'],
      ['dlq', 'list', file, 'pricer.dlq'],
      ['dlq', 'purge', file, 'pricer.dlq'],
    ]) {
      const r = await sluice(args);
      assert.is(r.code, 2, `${args.join(' ')}: ${r.out}${r.err}`);
      assert.is(r.out, '', args.join(' '));
      assert.match(
        r.err,
        new RegExp(
          `is a Kafka topic \\(${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: bus kind kafka\\); this reads the embedded journal only`,
        ),
        args.join(' '),
      );
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
