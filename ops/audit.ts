/**
 * The audit log of runtime changes: who changed what, when, from what to what. Kept as JSON
 * lines in `<dataDir>/ops/audit.jsonl` (appended and fsynced per entry, so it survives a crash
 * and a restart of the topology) and served newest first by GET /audit.
 */
import fs from 'node:fs';
import path from 'node:path';

/** One audited change. */
export interface AuditEntry {
  /** ISO time of the change. */
  time: string;
  /** Who asked: the authenticated user, else the `x-sluice-user` header, else `anonymous`. */
  user: string;
  /** Remote address of the request. */
  remote: string;
  /** What was changed, e.g. `log-level`. */
  action: string;
  /** What it applies to, e.g. an actor name or `*` for every actor. */
  target: string;
  before: unknown;
  after: unknown;
}

/** Entries kept in memory for GET /audit (older ones stay in the file). */
export const AUDIT_MEMORY_MAX = 10_000;

/** Appends and lists audit entries (see the module comment). */
export class AuditLog {
  readonly file: string;
  private readonly entries: AuditEntry[] = [];

  /** Opens (creating the directory) and loads the last AUDIT_MEMORY_MAX entries of the file. */
  constructor(dataDir: string) {
    this.file = path.join(dataDir, 'ops', 'audit.jsonl');
    fs.mkdirSync(path.dirname(this.file), { recursive: true });
    if (fs.existsSync(this.file)) {
      for (const line of fs.readFileSync(this.file, 'utf8').split('\n')) {
        if (!line.trim()) continue;
        try {
          this.entries.push(JSON.parse(line) as AuditEntry);
        } catch {
          // A torn last line after a crash: the entries before it are whole.
        }
      }
      this.entries.splice(0, Math.max(0, this.entries.length - AUDIT_MEMORY_MAX));
    }
  }

  /** Records one change durably. @returns the entry as stored. */
  record(entry: Omit<AuditEntry, 'time'>): AuditEntry {
    const full: AuditEntry = { time: new Date().toISOString(), ...entry };
    const fd = fs.openSync(this.file, 'a');
    try {
      fs.writeSync(fd, `${JSON.stringify(full)}\n`);
      fs.fdatasyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    this.entries.push(full);
    if (this.entries.length > AUDIT_MEMORY_MAX) this.entries.shift();
    return full;
  }

  /** The newest `limit` entries, newest first. */
  list(limit = 100): AuditEntry[] {
    return this.entries.slice(-limit).reverse();
  }
}
