import { fold } from "../protocol/fold.js";
import { applyLenient, applyStrict, Mutation, Operation } from "../protocol/merge.js";
import { RecordPages } from "./record-pages.js";
import { FileRefs } from "./file-refs.js";
import { StoredIndexes } from "./field-index.js";
import type { IndexScan } from "./field-index.js";
import type { QueryFilter } from "./query.js";
import type { AttachmentReference } from "../protocol/attachment.js";
import type { AttachmentFiles } from "./attachment-files.js";

/**
 * The replica's storage (PROTOCOL.md §6): the verified server state (records + state), the
 * write queue and the overlay. The sync engine, the replica and the view use only the
 * {@link ReplicaStore} interface; {@link TableStore} implements it once over its tables, and
 * a backend supplies the transactions — `IndexedDBStore` in a browser, `MemoryStore` in
 * memory (node, tests, a page that must keep nothing). Every change that must be atomic is
 * one transaction, so a tab closed at any moment leaves the old state or the new one.
 *
 * Tables: `pages` (the verified server records, a few hundred per row: see `RecordPages`),
 * `overlay` (id → { body: canonical text | null }: the local value of ids with pending
 * writes), `pending` (seq → PendingWrite), `meta` ("state" → ReplicaState, "queue" →
 * QueueState). The state and the queue are separate rows so that a pull (one tab) and a
 * local write (any tab) never overwrite each other's bookkeeping. `refs` (file references:
 * `FileRefs`) and `indexes` (declared indexes: `StoredIndexes`) are kept with the records, in
 * the transactions that change them.
 */

/** The verified server state's bookkeeping and the sync's health. */
export interface ReplicaState {
  token: string | null;
  /** `ETag` and `Last-Modified` exactly as received, sent back byte for byte. */
  etag: string | null;
  lastModified: string | null;
  checksum: string;
  count: number;
  /** LtHash16 lanes of the server state (maintained when trusted keys are set). */
  lanes: Uint16Array | null;
  lastSuccessfulSync: number | null;
  failingSince: number | null;
  failures: number;
  /** No request before this (ms since 1970): the replica's own backoff. */
  notBefore: number | null;
  /** No request before this: what the server asked for (Retry-After/Backoff). Survives reloads. */
  serverNotBefore: number | null;
  lastError: string | null;
  /** Highest verified index sequence (decimal) and that index's expiry (seconds). */
  indexSequence: string | null;
  indexExpires: number | null;
}

/** The write queue's bookkeeping. */
export interface QueueState {
  clientId: string;
  /** The highest write number ever given out (never reused, even once the queue is empty). */
  lastSeq: number;
  /** Every write numbered up to this was handed to a push at least once. */
  sentThrough: number;
  pushFailingSince: number | null;
  pushFailures: number;
  pushNotBefore: number | null;
  /** Why the last push stopped early (the writes stay queued), or null. */
  lastPushError?: string | null;
}

/** A local write waiting for the server, or accepted and waiting for the pull that brings it. */
export interface PendingWrite {
  seq: number;
  op: Operation;
  id: string;
  /** Canonical JSON text of the record (put, insert) or the fields (patch); null for delete. */
  value: string | null;
  /** The server accepted it; the next successful pull drops it from the queue and the overlay. */
  acked: boolean;
  createdAt: number;
  /** The token of the state held when the write was made (sent as the write's `base`). */
  base: string | null;
}

export const EMPTY_STATE: ReplicaState = {
  token: null, etag: null, lastModified: null, checksum: "0000000000000000", count: 0, lanes: null,
  lastSuccessfulSync: null, failingSince: null, failures: 0, notBefore: null, serverNotBefore: null, lastError: null,
  indexSequence: null, indexExpires: null,
};

/** What an apply commits, prepared and verified before the transaction opens. */
export interface PreparedApply {
  /** The token the replica must still hold (null: empty); another tab's apply makes this one void. */
  expectToken: string | null;
  /** A full body: every record not in `upserts` is removed. */
  replaceAll: boolean;
  upserts: [string, string][];
  deletes: string[];
  state: Partial<ReplicaState>;
}

/** Thrown inside a transaction when the state moved under it (another tab applied first). */
export class StateMovedError extends Error {}

/**
 * Hears a committed transaction's changed ids (`null`: anything) and the visible values it
 * knows of them (see `ReplicaStore.onRecordsChanged`).
 */
export type RecordsListener = (ids: string[] | null, values?: ReadonlyMap<string, string | null>) => void;


/**
 * What the sync engine, the replica and the view need from storage. Each method is one
 * transaction: it happens whole or not at all.
 */
export interface ReplicaStore {
  /** The database's name (the Web Lock and the BroadcastChannel of its tabs are named after it). */
  readonly name: string;
  readState(): Promise<ReplicaState>;
  readQueue(): Promise<QueueState | null>;
  /** Updates fields of the state row (failures, validators of a 304, backoff); settles accepted writes up to `settleThrough` when given. */
  updateState(change: Partial<ReplicaState>, settleThrough?: number | null): Promise<ReplicaState>;
  /** The value the app sees: the overlay's when the id has pending writes, else the server's; null when absent. */
  get(id: string): Promise<string | null>;
  /** Every visible record as the app sees it (overlay over server state), sorted by id. */
  all(): Promise<[string, string][]>;
  /** The visible values of `ids` (null: absent), in one transaction. Optional: without it, one `get` each. */
  getMany?(ids: string[]): Promise<(string | null)[]>;
  /**
   * Calls `listener` after each committed transaction that may have changed visible records,
   * with their ids (`null`: any record may have, e.g. a full body) and, for those whose value
   * the transaction wrote or computed, the value the app sees now (`values`: id → canonical
   * text, `null` when absent), so a listener need not read them again; an id missing from
   * `values` must be read. Returns the removal. Optional: without it, live queries hear only
   * the replica's own change events.
   */
  onRecordsChanged?(listener: RecordsListener): () => void;
  /**
   * Indexes `field` in the database (kept by every apply from then on, in every tab: see
   * `StoredIndexes`); built once from every record, nothing when it is already. Optional:
   * without it, queries read every record.
   */
  createIndex?(field: string): Promise<void>;
  /** Forgets the index on `field`. */
  dropIndex?(field: string): Promise<void>;
  /**
   * The visible records a filter on the indexed `field` may select, in one transaction: the
   * index's entries in range (in its order, or backwards; up to `limit` and their ties) whose
   * ids have no local value, then every local value (the caller filters and orders them all
   * again). Null when `field` is not indexed in this database.
   */
  indexedRows?(field: string, filter: QueryFilter | null, scan: Omit<IndexScan, "skip">): Promise<[string, string][] | null>;
  /** The server's values of `ids` (absent ids are missing from the map). */
  serverRecords(ids: string[]): Promise<Map<string, string>>;
  /** Every server record, in id order. */
  allServerRecords(): Promise<[string, string][]>;
  /**
   * Commits a verified body with its state and settles the queue (§6 step 8); throws
   * {@link StateMovedError} (nothing written) when the state held is no longer `prepared.expectToken`.
   */
  commitApply(prepared: PreparedApply, settleThrough: number | null): Promise<ReplicaState>;
  /** Queues one local write (folded into the newest unsent one on its id) and sets its local value; throws `WriteRefusedError`. */
  enqueue(write: Mutation, now: number): Promise<PendingWrite>;
  updateQueue(change: Partial<QueueState>): Promise<QueueState>;
  /** Queued writes, oldest first: all of them, or only those the server has not accepted. */
  pendingWrites(includeAccepted?: boolean): Promise<PendingWrite[]>;
  /** The next batch to push (the oldest writes not accepted), marked as sent before any byte of it leaves. */
  claimBatch(limit: number): Promise<{ clientId: string; lastSeq: number; batch: PendingWrite[] }>;
  /** Records a push answer: accepted writes stay (marked) until a pull brings them; refused ones are rolled back. */
  settlePush(accepted: number[], refused: number[]): Promise<void>;
  /** A new client id (the server reported numbers this replica never gave out). */
  rotateClientId(): Promise<string>;
  /** The file reference a record or local value makes to `sha256`, or null: one read (the `refs` table, kept as rows are written). */
  fileReference(sha256: string): Promise<AttachmentReference | null>;
  /** Every file the records and local values refer to: O(references), never a read of every record. */
  referencedFiles(): Promise<Map<string, AttachmentReference>>;
  /** The hashes whose last reference went or first came since they were settled, each with its change number. */
  fileChanges(): Promise<Record<string, number>>;
  /** Forgets the changes `settled` (those another tab did not change again meanwhile). */
  settleFileChanges(settled: Record<string, number>): Promise<void>;
  /** The tab is about to be frozen: end the transactions still open and start none until {@link resume}. */
  suspend(): void;
  resume(): void;
  close(): void;
}

/**
 * Small values kept beside the databases, which outlive them (the storage-loss marker, a
 * view's bookkeeping): `localStorage` in a browser. A method may throw (storage disabled):
 * callers treat that as absent.
 */
export interface MarkerStore {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/**
 * Where replicas keep their databases, one per collection or partition, by name:
 * `indexedDBStorage` (the default) or a `MemoryStorage`. A `DeltaSnapView` opens and
 * deletes its partitions' databases through it.
 */
export interface ReplicaStorage {
  /** Opens the database `name`, creating it when missing (`created`: it did not exist). */
  open(name: string): Promise<{ store: ReplicaStore; created: boolean }>;
  /** Deletes the database `name` and its files (nothing when it does not exist). */
  delete(name: string): Promise<void>;
  /**
   * Opens the files (attachments) of database `name`. Optional for a storage of the app's
   * own: without it a replica keeps its files in memory.
   */
  openFiles?(name: string): Promise<AttachmentFiles>;
  /** Where markers are kept, or null when there is no such place (loss then goes unreported). */
  readonly markers: MarkerStore | null;
}

/** The tables of a replica's database (`refs`: its file references, see `FileRefs`). */
export type TableName = "pages" | "overlay" | "pending" | "meta" | "refs" | "indexes";
export const TABLES: readonly TableName[] = ["pages", "overlay", "pending", "meta", "refs", "indexes"];
export type TableKey = string | number;

/**
 * One transaction's reads and writes on the tables (IndexedDB's object stores, or maps).
 * Reads resolve in key order (numbers before strings; strings by UTF-16 code units, as
 * IndexedDB orders keys). Writes are not awaited: they take effect in order, and one that
 * fails (`add` of a key that exists) aborts the transaction.
 */
export interface Tables {
  get<T>(table: TableName, key: TableKey): Promise<T | undefined>;
  getAll<T>(table: TableName): Promise<T[]>;
  getAllKeys(table: TableName): Promise<TableKey[]>;
  put(table: TableName, value: unknown, key: TableKey): void;
  add(table: TableName, value: unknown, key: TableKey): void;
  delete(table: TableName, key: TableKey): void;
  clear(table: TableName): void;
}

type Overlay = { body: string | null };

/**
 * {@link ReplicaStore} over {@link Tables}: the queue, the overlay and applies, written once
 * for every backend. A backend implements {@link transaction} (commit when `body` resolves,
 * abort when it throws, and only awaits of its own reads inside) and {@link abortOpen}.
 */
export abstract class TableStore implements ReplicaStore {
  /** While set, new transactions wait for `resume` (the tab is frozen). */
  private gate: Promise<void> | null = null;
  private openGate: (() => void) | null = null;

  private readonly changeListeners = new Set<RecordsListener>();

  protected constructor(readonly name: string) {}

  onRecordsChanged(listener: RecordsListener): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  /**
   * Tells the listeners, after the commit, which records a transaction changed, with the
   * visible values it knows of them (those it wrote or computed: no read).
   */
  private recordsChanged(ids: Iterable<string> | null, values?: ReadonlyMap<string, string | null>): void {
    const list = ids === null ? null : [...new Set(ids)];
    if (list !== null && list.length === 0) return;
    for (const listener of [...this.changeListeners]) listener(list, values);
  }

  /** Runs `body` in one transaction; it commits when `body` resolves, aborts when it throws. */
  protected abstract runTransaction<T>(mode: "readonly" | "readwrite", body: (t: Tables) => Promise<T>): Promise<T>;
  /** Aborts every transaction still open (an aborted apply leaves the state as it was). */
  protected abstract abortOpen(): void;
  abstract close(): void;

  /** Runs `body` in one transaction, once the tab is not frozen. */
  async transaction<T>(mode: "readonly" | "readwrite", body: (t: Tables) => Promise<T>): Promise<T> {
    while (this.gate) await this.gate;
    return this.runTransaction(mode, body);
  }

  /**
   * The tab is about to be frozen: abort every transaction still open and start no new one
   * until `resume`. A frozen tab's transaction — even a read one, started by code that ran
   * just before the freeze — holds IndexedDB's locks, and every other tab's writes (and
   * the reads queued behind them) would wait until this tab thaws. An aborted apply leaves
   * the state as it was; the sync that made it reports a failure.
   */
  suspend(): void {
    if (!this.gate) this.gate = new Promise((resolve) => (this.openGate = resolve));
    this.abortOpen();
  }

  /** The tab runs again: transactions may start. */
  resume(): void {
    this.openGate?.();
    this.gate = null;
    this.openGate = null;
  }

  // MARK: - Reading

  readState(): Promise<ReplicaState> {
    return this.transaction("readonly", (t) => stateIn(t));
  }

  readQueue(): Promise<QueueState | null> {
    return this.transaction("readonly", (t) => queueIn(t));
  }

  async updateState(change: Partial<ReplicaState>, settleThrough?: number | null): Promise<ReplicaState> {
    let touched: string[] = [];
    const next = await this.transaction("readwrite", async (t) => {
      const next = { ...(await stateIn(t)), ...change };
      t.put("meta", next, "state");
      if (settleThrough !== undefined) {
        const refs = await FileRefs.open(t);
        touched = (await settleAfterPull(t, settleThrough, refs)).touched;
        refs.flush();
      }
      return next;
    });
    this.recordsChanged(touched);
    return next;
  }

  async get(id: string): Promise<string | null> {
    return this.transaction("readonly", async (t) => {
      const local = await t.get<Overlay>("overlay", id);
      if (local) return local.body;
      return (await (await RecordPages.open(t)).get(id)) ?? null;
    });
  }

  async all(): Promise<[string, string][]> {
    return this.transaction("readonly", async (t) => {
      const [records, overlayIds, overlay] = await Promise.all([RecordPages.all(t), t.getAllKeys("overlay"), t.getAll<Overlay>("overlay")]);
      const local = new Map<string, string | null>();
      overlayIds.forEach((id, i) => local.set(id as string, overlay[i].body));
      if (local.size === 0) return records;
      const out: [string, string][] = [];
      for (const [key, body] of records) {
        if (local.has(key)) {
          const value = local.get(key)!;
          local.delete(key);
          if (value !== null) out.push([key, value]);
        } else out.push([key, body]);
      }
      for (const [id, body] of local) if (body !== null) out.push([id, body]);
      if (local.size) out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      return out;
    });
  }

  async getMany(ids: string[]): Promise<(string | null)[]> {
    return this.transaction("readonly", async (t) => {
      const pages = await RecordPages.open(t);
      const out: (string | null)[] = [];
      for (const id of ids) {
        const local = await t.get<Overlay>("overlay", id);
        out.push(local ? local.body : ((await pages.get(id)) ?? null));
      }
      return out;
    });
  }

  // MARK: - Declared indexes

  async createIndex(field: string): Promise<void> {
    const held = await this.transaction("readonly", async (t) => (await StoredIndexes.open(t)).fields.includes(field));
    if (held) return;
    await this.transaction("readwrite", async (t) => {
      const indexes = await StoredIndexes.open(t);
      await indexes.create(field, () => RecordPages.all(t));
    });
  }

  async dropIndex(field: string): Promise<void> {
    await this.transaction("readwrite", async (t) => (await StoredIndexes.open(t)).drop(field));
  }

  async indexedRows(field: string, filter: QueryFilter | null, scan: Omit<IndexScan, "skip">): Promise<[string, string][] | null> {
    return this.transaction("readonly", async (t) => {
      const [overlayIds, overlay, indexes] = await Promise.all([t.getAllKeys("overlay"), t.getAll<Overlay>("overlay"), StoredIndexes.open(t, field)]);
      const rows = await indexes.select(field, filter, { ...scan, skip: new Set(overlayIds as string[]) });
      if (rows === null) return null;
      overlayIds.forEach((id, i) => { if (overlay[i].body !== null) rows.push([id as string, overlay[i].body!]); });
      return rows;
    });
  }

  async serverRecords(ids: string[]): Promise<Map<string, string>> {
    return this.transaction("readonly", async (t) => {
      const pages = await RecordPages.open(t);
      const out = new Map<string, string>();
      for (const id of ids) {
        const body = await pages.get(id);
        if (body !== undefined) out.set(id, body);
      }
      return out;
    });
  }

  async allServerRecords(): Promise<[string, string][]> {
    return this.transaction("readonly", (t) => RecordPages.all(t));
  }

  // MARK: - Applying a verified body

  async commitApply(prepared: PreparedApply, settleThrough: number | null): Promise<ReplicaState> {
    let touched: string[] = [];
    let local = new Map<string, string | null>();
    const next = await this.transaction("readwrite", async (t) => {
      const current = await stateIn(t);
      if (current.token !== prepared.expectToken) throw new StateMovedError(`the replica moved to ${current.token} meanwhile`);
      // File references change with the records, in this transaction: O(changes).
      const refs = await FileRefs.open(t);
      // Declared indexes change with the records, in this transaction (nothing more when there are none).
      const indexes = await StoredIndexes.open(t);
      if (prepared.replaceAll) {
        RecordPages.replaceAll(t, prepared.upserts);
        await indexes.replaceAll(prepared.upserts);
        await refs.clearRecords();
        for (const [id, body] of prepared.upserts) if (body.includes('"$attachment"')) await refs.set("r", id, body);
      }
      const pages = await RecordPages.open(t);
      if (!prepared.replaceAll) {
        for (const [id, body] of prepared.upserts) {
          const before = indexes.empty ? undefined : await pages.get(id);
          await pages.set(id, body);
          await indexes.move(id, before, body);
          await refs.set("r", id, body);
        }
        for (const id of prepared.deletes) {
          const before = indexes.empty ? undefined : await pages.get(id);
          await pages.delete(id);
          await indexes.move(id, before, undefined);
          await refs.set("r", id, null);
        }
      }
      const next = { ...current, ...prepared.state };
      t.put("meta", next, "state");
      ({ touched, local } = await settleAfterPull(t, settleThrough, refs, pages));
      pages.flush();
      indexes.flush();
      refs.flush();
      return next;
    });
    // A full body may change any record; a delta, the ids it names and those with local values.
    if (prepared.replaceAll) this.recordsChanged(null);
    else {
      // What the app sees of them now is known here (the live queries read none again): the
      // local value where writes are still pending, else what the delta wrote; an id that only
      // lost its local value shows its server value again, not read here (nor named in `values`).
      const values = new Map<string, string | null>();
      for (const [id, body] of prepared.upserts) values.set(id, local.has(id) ? local.get(id)! : body);
      for (const id of prepared.deletes) values.set(id, local.has(id) ? local.get(id)! : null);
      for (const [id, value] of local) values.set(id, value);
      this.recordsChanged([...prepared.upserts.map(([id]) => id), ...prepared.deletes, ...touched], values);
    }
    return next;
  }

  // MARK: - The write queue

  /**
   * Queues one write and sets its id's local value, in one transaction (§6 step 5); returns
   * the write. Throws `WriteRefusedError` (nothing queued) for a write the server would refuse
   * given the local value.
   */
  async enqueue(write: Mutation, now: number): Promise<PendingWrite> {
    // The id's visible value once committed (the overlay's, or the server's when a fold cancelled every write).
    let visible: string | null = null;
    const pending = await this.transaction("readwrite", async (t) => {
      const local = await t.get<Overlay>("overlay", write.id);
      const pages = await RecordPages.open(t);
      const current = local ? local.body : ((await pages.get(write.id)) ?? null);
      const value = applyStrict(write, current);
      const queue = await ensureQueue(t);
      const all = await t.getAll<PendingWrite>("pending");
      // §6 step 5a: fold into the newest write on this id when it was never sent.
      const tail = all.filter((w) => w.id === write.id).pop();
      if (tail && !tail.acked && tail.seq > queue.sentThrough) {
        const serverHasRecord = (await pages.get(write.id)) !== undefined;
        const folded = fold(write, { op: tail.op, id: tail.id, value: tail.value }, serverHasRecord);
        if (folded !== null) {
          const refs = await FileRefs.open(t);
          const rest = all.filter((w) => w.seq !== tail.seq);
          let result: PendingWrite;
          if (folded === "nothing") {
            t.delete("pending", tail.seq);
            result = { ...tail, op: write.op, value: write.value };
          } else {
            result = { ...tail, op: folded.op, value: folded.value };
            t.put("pending", result, tail.seq);
            rest.push(result);
          }
          const rebuilt = await rebuildOverlay(t, write.id, refs, rest, pages);
          visible = rebuilt !== undefined ? rebuilt : (await pages.get(write.id)) ?? null;
          refs.flush();
          return result;
        }
      }
      const state = await stateIn(t);
      const pending: PendingWrite = { seq: queue.lastSeq + 1, op: write.op, id: write.id, value: write.value, acked: false, createdAt: now, base: state.token };
      t.add("pending", pending, pending.seq);
      t.put("meta", { ...queue, lastSeq: pending.seq }, "queue");
      t.put("overlay", { body: value }, write.id);
      const refs = await FileRefs.open(t);
      await refs.set("o", write.id, value);
      refs.flush();
      visible = value;
      return pending;
    });
    this.recordsChanged([write.id], new Map([[write.id, visible]]));
    return pending;
  }

  async updateQueue(change: Partial<QueueState>): Promise<QueueState> {
    return this.transaction("readwrite", async (t) => {
      const next = { ...(await ensureQueue(t)), ...change };
      t.put("meta", next, "queue");
      return next;
    });
  }

  async pendingWrites(includeAccepted = true): Promise<PendingWrite[]> {
    return this.transaction("readonly", async (t) => {
      const all = await t.getAll<PendingWrite>("pending");
      return all.filter((w) => includeAccepted || !w.acked);
    });
  }

  async claimBatch(limit: number): Promise<{ clientId: string; lastSeq: number; batch: PendingWrite[] }> {
    return this.transaction("readwrite", async (t) => {
      const queue = await ensureQueue(t);
      const all = await t.getAll<PendingWrite>("pending");
      const batch = all.filter((w) => !w.acked).slice(0, limit);
      const last = batch.length ? batch[batch.length - 1].seq : 0;
      if (last > queue.sentThrough) t.put("meta", { ...queue, sentThrough: last }, "queue");
      return { clientId: queue.clientId, lastSeq: queue.lastSeq, batch };
    });
  }

  async settlePush(accepted: number[], refused: number[]): Promise<void> {
    const touched = new Set<string>();
    const values = new Map<string, string | null>();
    await this.transaction("readwrite", async (t) => {
      for (const seq of accepted) {
        const w = await t.get<PendingWrite>("pending", seq);
        if (w) t.put("pending", { ...w, acked: true }, seq);
      }
      for (const seq of refused) {
        const w = await t.get<PendingWrite>("pending", seq);
        if (w) { t.delete("pending", seq); touched.add(w.id); }
      }
      const refs = await FileRefs.open(t);
      const pages = touched.size ? await RecordPages.open(t) : null;
      for (const id of touched) {
        // The local value the writes left still pending give, or the server's value again.
        const rebuilt = await rebuildOverlay(t, id, refs, undefined, pages!);
        values.set(id, rebuilt !== undefined ? rebuilt : (await pages!.get(id)) ?? null);
      }
      refs.flush();
    });
    // Refused writes rolled back; accepted ones change nothing the app sees.
    this.recordsChanged(touched, values);
  }

  // MARK: - File references

  async fileReference(sha256: string): Promise<AttachmentReference | null> {
    await this.ensureFileRefs();
    return this.transaction("readonly", (t) => FileRefs.reference(t, sha256));
  }

  async referencedFiles(): Promise<Map<string, AttachmentReference>> {
    await this.ensureFileRefs();
    return this.transaction("readonly", (t) => FileRefs.all(t));
  }

  async fileChanges(): Promise<Record<string, number>> {
    return this.transaction("readonly", async (t) => (await t.get<Record<string, number>>("meta", "fileChanges")) ?? {});
  }

  async settleFileChanges(settled: Record<string, number>): Promise<void> {
    if (Object.keys(settled).length === 0) return;
    await this.transaction("readwrite", async (t) => {
      const changes = (await t.get<Record<string, number>>("meta", "fileChanges")) ?? {};
      for (const [sha256, n] of Object.entries(settled)) if (changes[sha256] === n) delete changes[sha256];
      t.put("meta", changes, "fileChanges");
    });
  }

  /** Whether the `refs` table is built: a database from before it is indexed once, from its rows. */
  private refsBuilt = false;

  private async ensureFileRefs(): Promise<void> {
    if (this.refsBuilt) return;
    this.refsBuilt = await this.transaction("readonly", async (t) => (await t.get<boolean>("meta", "refsBuilt")) ?? false);
    if (this.refsBuilt) return;
    await this.transaction("readwrite", async (t) => (await FileRefs.open(t)).flush());
    this.refsBuilt = true;
  }

  async rotateClientId(): Promise<string> {
    return (await this.updateQueue({ clientId: newClientId() })).clientId;
  }
}

async function stateIn(t: Tables): Promise<ReplicaState> {
  return { ...EMPTY_STATE, ...((await t.get<ReplicaState>("meta", "state")) ?? {}) };
}

async function queueIn(t: Tables): Promise<QueueState | null> {
  return (await t.get<QueueState>("meta", "queue")) ?? null;
}

/** The queue row, created with a fresh client id on first use. */
async function ensureQueue(t: Tables): Promise<QueueState> {
  const existing = await queueIn(t);
  if (existing) return existing;
  const queue: QueueState = { clientId: newClientId(), lastSeq: 0, sentThrough: 0, pushFailingSince: null, pushFailures: 0, pushNotBefore: null };
  t.put("meta", queue, "queue");
  return queue;
}

/**
 * Drops accepted writes up to `through` and recomputes every overlay (inside a pull's
 * transaction); returns the ids that had local values (`touched`) and the local values
 * now held (`local`: id → value, for the ids whose writes are still pending).
 */
async function settleAfterPull(t: Tables, through: number | null, refs: FileRefs, pages?: RecordPages): Promise<{ touched: string[]; local: Map<string, string | null> }> {
  const pending = await t.getAll<PendingWrite>("pending");
  const kept: PendingWrite[] = [];
  for (const w of pending) {
    if (through !== null && w.acked && w.seq <= through) t.delete("pending", w.seq);
    else kept.push(w);
  }
  // The local values' file references go with them (O(local values)).
  const local = (await t.getAllKeys("overlay")) as string[];
  for (const id of local) await refs.set("o", id, null);
  t.clear("overlay");
  const values = new Map<string, string | null>();
  if (kept.length === 0) return { touched: local, local: values };
  const server = pages ?? (await RecordPages.open(t));
  for (const id of new Set(kept.map((w) => w.id))) values.set(id, (await rebuildOverlay(t, id, refs, kept, server))!);
  return { touched: local, local: values };
}

/**
 * An id's local value: its server value with its pending writes replayed leniently, in seq
 * order. Returns it (null: the writes delete the record), or undefined when no write is left
 * (the id has no local value: the app sees the server's again).
 */
async function rebuildOverlay(t: Tables, id: string, refs: FileRefs, pending?: PendingWrite[], pages?: RecordPages): Promise<string | null | undefined> {
  const writes = (pending ?? (await t.getAll<PendingWrite>("pending"))).filter((w) => w.id === id);
  if (writes.length === 0) {
    t.delete("overlay", id);
    await refs.set("o", id, null);
    return undefined;
  }
  let value = (await (pages ?? (await RecordPages.open(t))).get(id)) ?? null;
  for (const w of writes.sort((a, b) => a.seq - b.seq)) value = applyLenient({ op: w.op, id, value: w.value }, value);
  t.put("overlay", { body: value }, id);
  await refs.set("o", id, value);
  return value;
}

/** A lowercase UUID, as the Swift client makes (1–128 of `A-Za-z0-9._:-`, §5.5). */
export function newClientId(): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c?.randomUUID) return c.randomUUID().toLowerCase();
  const bytes = new Uint8Array(16);
  c?.getRandomValues ? c.getRandomValues(bytes) : bytes.forEach((_, i) => (bytes[i] = Math.floor(Math.random() * 256)));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
