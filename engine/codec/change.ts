import { Builder, Encoding } from 'flatbuffers';
import { Change as ChangeTable, Op } from '../../schemas/index.js';
import { ByteBufferCache, copyBytes } from './byte-buffers.js';
import { checkRange } from './json.js';
import { decodeUtf8, utf8Encoder, Utf8Cache } from './utf8.js';

/** Kind of captured row change; `read` is a row of a table's initial load (engine/cdc/initial-load.ts). */
export type ChangeOp = 'insert' | 'update' | 'delete' | 'truncate' | 'read';

/**
 * A captured row change, the payload of an EVENT_TYPE_CHANGE envelope (schemas/sluice.fbs
 * `Change`). Column images are JSON object texts whose column values are JSON strings (exact
 * database text, never a JS number) or null; see engine/cdc.
 *
 * - `stagingId`: staging-table row id (decimal text), unique per capture source.
 * - `key`: key column values as JSON array text.
 * - `before`: row before the change (update, delete), else null. `after`: row after (insert,
 *   update), else null. The empty string is a value distinct from null.
 * - `txid`: database transaction id as text. `commitTimeMs`: ms since the Unix epoch.
 * - `installation`: installation id of the capture that staged it (engine/cdc/staging.ts
 *   "Installation id"); staging ids are unique only within one installation, so crash
 *   reconciliation matches a record only when this equals the current installation's id. Absent
 *   (undefined) in records written before it existed and in changes not made by a capture
 *   pump; encoding '' writes it absent too.
 */
export interface Change {
  stagingId: string;
  table: string;
  op: ChangeOp;
  key: string;
  before: string | null;
  after: string | null;
  txid: string;
  commitTimeMs: number;
  installation?: string;
}

const OP_CODES: Readonly<Record<ChangeOp, Op>> = {
  insert: Op.Insert,
  update: Op.Update,
  delete: Op.Delete,
  truncate: Op.Truncate,
  read: Op.Read,
};
const OP_NAMES: readonly (ChangeOp | undefined)[] = [
  undefined,
  'insert',
  'update',
  'delete',
  'truncate',
  'read',
];

// One builder per thread; encodeChange is synchronous, so it is never shared mid-build.
const builder = new Builder(1024);
// Table names repeat on every change of a table; a handful of entries suffices.
const tableNames = new Utf8Cache(256, 128);
// One installation id per pump: its UTF-8 bytes are cached, not encoded per change.
const installations = new Utf8Cache(16, 64);

/**
 * Encodes `change` as a FlatBuffers `Change`; returns a copy the caller owns (small copies share
 * a slab ArrayBuffer, like Node's Buffer pool: never transfer or detach `.buffer`).
 * @throws Error when `op` is not insert|update|delete|truncate|read or a required string is not a
 *   string.
 */
export function encodeChange(change: Change): Uint8Array {
  const op = OP_CODES[change.op];
  if (op === undefined) {
    throw new Error(
      `change op must be insert|update|delete|truncate|read, op=${String(change.op)}`,
    );
  }
  for (const field of ['stagingId', 'table', 'key', 'txid'] as const) {
    if (typeof change[field] !== 'string') {
      throw new Error(`change ${field} must be a string, ${field}=${String(change[field])}`);
    }
  }
  const b = builder;
  b.clear();
  // createString(null) would return 0 (absent), but '' must stay '' : encode explicitly.
  const after = change.after === null ? 0 : b.createString(utf8Encoder.encode(change.after));
  const before = change.before === null ? 0 : b.createString(utf8Encoder.encode(change.before));
  const key = b.createString(utf8Encoder.encode(change.key));
  const txid = b.createString(utf8Encoder.encode(change.txid));
  const table = b.createString(tableNames.encode(change.table));
  const stagingId = b.createString(utf8Encoder.encode(change.stagingId));
  const installation =
    change.installation === undefined || change.installation === ''
      ? 0
      : b.createString(installations.encode(change.installation));
  ChangeTable.startChange(b);
  ChangeTable.addCommitTimeMs(b, change.commitTimeMs);
  ChangeTable.addStagingId(b, stagingId);
  ChangeTable.addTable(b, table);
  ChangeTable.addKey(b, key);
  if (before !== 0) ChangeTable.addBefore(b, before);
  if (after !== 0) ChangeTable.addAfter(b, after);
  ChangeTable.addTxid(b, txid);
  ChangeTable.addOp(b, op);
  if (installation !== 0) ChangeTable.addInstallation(b, installation);
  b.finish(ChangeTable.endChange(b));
  return copyBytes(b.asUint8Array());
}

const reader = new ChangeTable();
const buffers = new ByteBufferCache();

function readString(bytes: Uint8Array | string | null): string | null {
  // Encoding.UTF8_BYTES always yields bytes; decode with our BOM-preserving decoder.
  return bytes === null ? null : decodeUtf8(bytes as Uint8Array, 0, (bytes as Uint8Array).length);
}

function requireString(value: string | null, field: string): string {
  if (value === null) throw new Error(`Change is missing required field ${field}`);
  return value;
}

/**
 * Decodes a FlatBuffers `Change` from `bytes[offset, offset + length)` (default: all of it) into
 * plain data (strings copied out; nothing refers to `bytes` afterwards).
 * @throws RangeError when the range is outside `bytes` or too short; Error when op is unknown or
 *   stagingId, table, key or txid is absent.
 */
export function decodeChange(
  bytes: Uint8Array,
  offset = 0,
  length = bytes.length - offset,
): Change {
  checkRange(bytes, offset, length);
  if (length < 8) throw new RangeError(`Change must be at least 8 bytes, length=${length}`);
  const bb = buffers.over(bytes);
  const start = bytes.byteOffset + offset;
  const root = start + bb.readInt32(start);
  if (root < start + 4 || root > start + length - 4) {
    throw new RangeError(
      `Change root offset out of range: offset=${offset} length=${length} ` +
        `root=${root - bytes.byteOffset}`,
    );
  }
  const c = reader.__init(root, bb);
  const opCode = c.op();
  const op = OP_NAMES[opCode];
  if (op === undefined) throw new Error(`Change has unknown op code ${opCode}`);
  const out: Change = {
    stagingId: requireString(readString(c.stagingId(Encoding.UTF8_BYTES)), 'staging_id'),
    table: requireString(readString(c.table(Encoding.UTF8_BYTES)), 'table'),
    op,
    key: requireString(readString(c.key(Encoding.UTF8_BYTES)), 'key'),
    before: readString(c.before(Encoding.UTF8_BYTES)),
    after: readString(c.after(Encoding.UTF8_BYTES)),
    txid: requireString(readString(c.txid(Encoding.UTF8_BYTES)), 'txid'),
    commitTimeMs: c.commitTimeMs(),
  };
  const installation = readString(c.installation(Encoding.UTF8_BYTES));
  if (installation !== null) out.installation = installation;
  return out;
}
