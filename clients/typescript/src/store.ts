import { StorageError } from "./errors.js";
import { fold } from "./fold.js";
import { applyLenient, applyStrict, Mutation, Operation } from "./merge.js";
import { RecordPages } from "./record-pages.js";

/**
 * The replica in IndexedDB: the verified server state (records + state), the write queue
 * and the overlay (PROTOCOL.md §6). Every change that must be atomic is one IndexedDB
 * transaction, so a tab closed at any moment leaves the old state or the new one.
 *
 * Object stores: `pages` (the verified server records, a few hundred per row: see
 * `RecordPages`), `overlay`
 * (id → { body: canonical text | null }: the local value of ids with pending writes),
 * `pending` (seq → PendingWrite), `meta` ("state" → ReplicaState, "queue" → QueueState).
 * The state and the queue are separate rows so that a pull (one tab) and a local write
 * (any tab) never overwrite each other's bookkeeping.
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

const STORES = ["pages", "overlay", "pending", "meta"];

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

export class ReplicaStore {
  /** Transactions not finished yet, so a tab about to be frozen can end them. */
  private readonly active = new Set<IDBTransaction>();

  private constructor(readonly db: IDBDatabase, readonly name: string) {}

  /** While set, new transactions wait for `resume` (the tab is frozen). */
  private gate: Promise<void> | null = null;
  private openGate: (() => void) | null = null;

  /**
   * The tab is about to be frozen: abort every transaction still open and start no new one
   * until `resume`. A frozen tab's transaction — even a read one, started by code that ran
   * just before the freeze — holds IndexedDB's locks, and every other tab's writes (and
   * the reads queued behind them) would wait until this tab thaws. An aborted apply leaves
   * the state as it was; the sync that made it reports a failure.
   */
  suspend(): void {
    if (!this.gate) this.gate = new Promise((resolve) => (this.openGate = resolve));
    for (const tx of this.active) {
      try { tx.abort(); } catch { /* finished meanwhile */ }
    }
    this.active.clear();
  }

  /** The tab runs again: transactions may start. */
  resume(): void {
    this.openGate?.();
    this.gate = null;
    this.openGate = null;
  }

  /** Opens (creating when missing) the database; `created` is true when it did not exist. */
  static async open(name: string): Promise<{ store: ReplicaStore; created: boolean }> {
    if (typeof indexedDB === "undefined") throw new StorageError("IndexedDB is not available in this context (a private window or a non-browser runtime)");
    let created = false;
    const open = indexedDB.open(name, 1);
    open.onupgradeneeded = (event) => {
      created = event.oldVersion === 0;
      const db = open.result;
      for (const s of STORES) if (!db.objectStoreNames.contains(s)) db.createObjectStore(s);
    };
    let db: IDBDatabase;
    try {
      db = await new Promise<IDBDatabase>((resolve, reject) => {
        open.onsuccess = () => resolve(open.result);
        open.onerror = () => reject(open.error);
        open.onblocked = () => reject(new StorageError(`the database "${name}" is blocked by another tab with an older version: close the other tabs`));
      });
    } catch (error) {
      if (error instanceof StorageError) throw error;
      throw new StorageError(`cannot open IndexedDB database "${name}": ${(error as Error)?.message ?? error}`, error);
    }
    const store = new ReplicaStore(db, name);
    // A tab that deletes the database (the app, or the test of storage loss) must not be
    // blocked by this connection.
    db.onversionchange = () => db.close();
    return { store, created };
  }

  close(): void {
    this.db.close();
  }

  /** Runs `body` in one transaction; it commits when `body` resolves, aborts when it throws. */
  async transaction<T>(mode: IDBTransactionMode, body: (tx: IDBTransaction) => Promise<T>): Promise<T> {
    while (this.gate) await this.gate;
    let tx: IDBTransaction;
    try {
      tx = (this.db.transaction as (s: string[], m: IDBTransactionMode, o?: object) => IDBTransaction)(STORES, mode, { durability: "strict" });
    } catch (error) {
      throw new StorageError(`IndexedDB refused a transaction: ${(error as Error).message}`, error);
    }
    this.active.add(tx);
    const done = new Promise<void>((resolve, reject) => {
      tx.oncomplete = () => { this.active.delete(tx); resolve(); };
      tx.onabort = () => { this.active.delete(tx); reject(tx.error ?? new StorageError("the transaction was aborted")); };
    });
    let result: T;
    try {
      result = await body(tx);
    } catch (error) {
      try { tx.abort(); } catch { /* already finished */ }
      done.catch(() => undefined);
      throw error;
    }
    try {
      await done;
    } catch (error) {
      throw new StorageError(`IndexedDB could not commit: ${(error as Error)?.message ?? error} (is the storage quota exhausted?)`, error);
    }
    return result;
  }

  // MARK: - Reading

  async readState(tx?: IDBTransaction): Promise<ReplicaState> {
    const run = async (t: IDBTransaction) => ({ ...EMPTY_STATE, ...((await request(t.objectStore("meta").get("state"))) ?? {}) }) as ReplicaState;
    return tx ? run(tx) : this.transaction("readonly", run);
  }

  async readQueue(tx?: IDBTransaction): Promise<QueueState | null> {
    const run = async (t: IDBTransaction) => ((await request(t.objectStore("meta").get("queue"))) ?? null) as QueueState | null;
    return tx ? run(tx) : this.transaction("readonly", run);
  }

  /** Updates fields of the state row (failures, validators of a 304, backoff). */
  async updateState(change: Partial<ReplicaState>, settleThrough?: number | null): Promise<ReplicaState> {
    return this.transaction("readwrite", async (tx) => {
      const next = { ...(await this.readState(tx)), ...change };
      tx.objectStore("meta").put(next, "state");
      if (settleThrough !== undefined) await this.settleAfterPull(tx, settleThrough);
      return next;
    });
  }

  /** The value the app sees: the overlay's when the id has pending writes, else the server's. */
  async get(id: string): Promise<string | null> {
    return this.transaction("readonly", async (tx) => {
      const local = (await request(tx.objectStore("overlay").get(id))) as { body: string | null } | undefined;
      if (local) return local.body;
      return (await (await RecordPages.open(tx)).get(id)) ?? null;
    });
  }

  /** Every visible record as the app sees it (overlay over server state), sorted by id. */
  async all(): Promise<[string, string][]> {
    return this.transaction("readonly", async (tx) => {
      const [records, overlayIds, overlay] = await Promise.all([
        RecordPages.all(tx), request(tx.objectStore("overlay").getAllKeys()), request(tx.objectStore("overlay").getAll()),
      ]);
      const local = new Map<string, string | null>();
      overlayIds.forEach((id, i) => local.set(id as string, (overlay[i] as { body: string | null }).body));
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

  /** The server's values of `ids` (undefined: absent). */
  async serverRecords(ids: string[]): Promise<Map<string, string>> {
    return this.transaction("readonly", async (tx) => {
      const pages = await RecordPages.open(tx);
      const out = new Map<string, string>();
      for (const id of ids) {
        const body = await pages.get(id);
        if (body !== undefined) out.set(id, body);
      }
      return out;
    });
  }

  /** Every server record (for recomputing the digest once). */
  async allServerRecords(): Promise<[string, string][]> {
    return this.transaction("readonly", (tx) => RecordPages.all(tx));
  }

  // MARK: - Applying a verified body

  /**
   * Commits a verified body with its state in one transaction, and settles the queue
   * (§6 step 8): accepted writes up to `settleThrough` leave it, every overlay is
   * recomputed over the new server state. Throws `StateMovedError` when the state held is
   * no longer `expectToken` (nothing is written then).
   */
  async commitApply(prepared: PreparedApply, settleThrough: number | null): Promise<ReplicaState> {
    return this.transaction("readwrite", async (tx) => {
      const current = await this.readState(tx);
      if (current.token !== prepared.expectToken) throw new StateMovedError(`the replica moved to ${current.token} meanwhile`);
      if (prepared.replaceAll) RecordPages.replaceAll(tx, prepared.upserts);
      const pages = await RecordPages.open(tx);
      if (!prepared.replaceAll) {
        for (const [id, body] of prepared.upserts) await pages.set(id, body);
        for (const id of prepared.deletes) await pages.delete(id);
      }
      const next = { ...current, ...prepared.state };
      tx.objectStore("meta").put(next, "state");
      await this.settleAfterPull(tx, settleThrough, pages);
      pages.flush();
      return next;
    });
  }

  /** Drops accepted writes up to `through` and recomputes every overlay (inside a pull's transaction). */
  private async settleAfterPull(tx: IDBTransaction, through: number | null, pages?: RecordPages): Promise<void> {
    const pending = ((await request(tx.objectStore("pending").getAll())) as PendingWrite[]);
    const kept: PendingWrite[] = [];
    for (const w of pending) {
      if (through !== null && w.acked && w.seq <= through) tx.objectStore("pending").delete(w.seq);
      else kept.push(w);
    }
    tx.objectStore("overlay").clear();
    if (kept.length === 0) return;
    const server = pages ?? (await RecordPages.open(tx));
    for (const id of new Set(kept.map((w) => w.id))) await this.rebuildOverlay(tx, id, kept, server);
  }

  /** An id's local value: its server value with its pending writes replayed leniently, in seq order. */
  private async rebuildOverlay(tx: IDBTransaction, id: string, pending?: PendingWrite[], pages?: RecordPages): Promise<void> {
    const writes = (pending ?? ((await request(tx.objectStore("pending").getAll())) as PendingWrite[])).filter((w) => w.id === id);
    if (writes.length === 0) {
      tx.objectStore("overlay").delete(id);
      return;
    }
    let value = (await (pages ?? (await RecordPages.open(tx))).get(id)) ?? null;
    for (const w of writes.sort((a, b) => a.seq - b.seq)) value = applyLenient({ op: w.op, id, value: w.value }, value);
    tx.objectStore("overlay").put({ body: value }, id);
  }

  // MARK: - The write queue

  /**
   * Queues one write and sets its id's local value, in one transaction (§6 step 5); returns
   * the write. Throws `WriteRefusedError` (nothing queued) for a write the server would refuse
   * given the local value.
   */
  async enqueue(write: Mutation, now: number): Promise<PendingWrite> {
    return this.transaction("readwrite", async (tx) => {
      const local = (await request(tx.objectStore("overlay").get(write.id))) as { body: string | null } | undefined;
      const pages = await RecordPages.open(tx);
      const current = local ? local.body : ((await pages.get(write.id)) ?? null);
      const value = applyStrict(write, current);
      const queue = await this.ensureQueue(tx);
      const pendingStore = tx.objectStore("pending");
      const all = (await request(pendingStore.getAll())) as PendingWrite[];
      // §6 step 5a: fold into the newest write on this id when it was never sent.
      const tail = all.filter((w) => w.id === write.id).pop();
      if (tail && !tail.acked && tail.seq > queue.sentThrough) {
        const serverHasRecord = (await pages.get(write.id)) !== undefined;
        const folded = fold(write, { op: tail.op, id: tail.id, value: tail.value }, serverHasRecord);
        if (folded !== null) {
          const rest = all.filter((w) => w.seq !== tail.seq);
          let result: PendingWrite;
          if (folded === "nothing") {
            pendingStore.delete(tail.seq);
            result = { ...tail, op: write.op, value: write.value };
          } else {
            result = { ...tail, op: folded.op, value: folded.value };
            pendingStore.put(result, tail.seq);
            rest.push(result);
          }
          await this.rebuildOverlay(tx, write.id, rest, pages);
          return result;
        }
      }
      const state = await this.readState(tx);
      const pending: PendingWrite = { seq: queue.lastSeq + 1, op: write.op, id: write.id, value: write.value, acked: false, createdAt: now, base: state.token };
      pendingStore.add(pending, pending.seq);
      tx.objectStore("meta").put({ ...queue, lastSeq: pending.seq }, "queue");
      tx.objectStore("overlay").put({ body: value }, write.id);
      return pending;
    });
  }

  /** The queue row, created with a fresh client id on first use. */
  async ensureQueue(tx: IDBTransaction): Promise<QueueState> {
    const existing = await this.readQueue(tx);
    if (existing) return existing;
    const queue: QueueState = { clientId: newClientId(), lastSeq: 0, sentThrough: 0, pushFailingSince: null, pushFailures: 0, pushNotBefore: null };
    tx.objectStore("meta").put(queue, "queue");
    return queue;
  }

  async updateQueue(change: Partial<QueueState>): Promise<QueueState> {
    return this.transaction("readwrite", async (tx) => {
      const next = { ...(await this.ensureQueue(tx)), ...change };
      tx.objectStore("meta").put(next, "queue");
      return next;
    });
  }

  /** Queued writes, oldest first: those not yet accepted, or all of them. */
  async pendingWrites(includeAccepted = true): Promise<PendingWrite[]> {
    return this.transaction("readonly", async (tx) => {
      const all = (await request(tx.objectStore("pending").getAll())) as PendingWrite[];
      return all.filter((w) => includeAccepted || !w.acked);
    });
  }

  /**
   * The next batch to push (the oldest writes not accepted), marked as sent in the same
   * transaction before any byte of it leaves; returns it with the client id to send.
   */
  async claimBatch(limit: number): Promise<{ clientId: string; lastSeq: number; batch: PendingWrite[] }> {
    return this.transaction("readwrite", async (tx) => {
      const queue = await this.ensureQueue(tx);
      const all = (await request(tx.objectStore("pending").getAll())) as PendingWrite[];
      const batch = all.filter((w) => !w.acked).slice(0, limit);
      const last = batch.length ? batch[batch.length - 1].seq : 0;
      if (last > queue.sentThrough) tx.objectStore("meta").put({ ...queue, sentThrough: last }, "queue");
      return { clientId: queue.clientId, lastSeq: queue.lastSeq, batch };
    });
  }

  /**
   * Records a push answer in one transaction: accepted writes stay in the overlay (marked
   * accepted) until a pull brings their value; refused ones leave at once (rolled back).
   */
  async settlePush(accepted: number[], refused: number[]): Promise<void> {
    await this.transaction("readwrite", async (tx) => {
      const pending = tx.objectStore("pending");
      const touched = new Set<string>();
      for (const seq of accepted) {
        const w = (await request(pending.get(seq))) as PendingWrite | undefined;
        if (w) pending.put({ ...w, acked: true }, seq);
      }
      for (const seq of refused) {
        const w = (await request(pending.get(seq))) as PendingWrite | undefined;
        if (w) { pending.delete(seq); touched.add(w.id); }
      }
      for (const id of touched) await this.rebuildOverlay(tx, id);
    });
  }

  /** A new client id: the server reported numbers this replica never gave out (a restored backup). */
  async rotateClientId(): Promise<string> {
    return (await this.updateQueue({ clientId: newClientId() })).clientId;
  }
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
