import { loadBundledSnapshot } from "./bundle.js";
import { AttachmentReference, parseReference, referenceJSON, referencesIn } from "../protocol/attachment.js";
import { AttachmentPolicy, AttachmentProgress, AttachmentReport, AttachmentStatus, emptyAttachmentReport, ReplicaAttachments } from "./attachments.js";
import { MemoryFilesByName } from "./attachment-files.js";
import { StateChecksum } from "../protocol/checksum.js";
import { AttachmentError, BundleError, DeltaSnapError, WriteRefusedError } from "../protocol/errors.js";
import { canonicalString, fromPlain } from "../protocol/json.js";
import { Operation } from "../protocol/merge.js";
import { LiveLoop, LiveOptions, LiveStep } from "./live.js";
import { DEFAULT_RETRY_POLICY, RetryPolicy, serverDelay } from "../protocol/retry.js";
import { ALLOWED_CLOCK_SKEW, TrustedKey } from "../protocol/signed-index.js";
import { readIndex } from "./index-client.js";
import { indexedDBStorage } from "./indexeddb-store.js";
import { LiveQuery, QueryEngine, ReplicaQuery } from "./query.js";
import { PendingWrite, ReplicaStorage, ReplicaStore } from "./store.js";
import { fetchTextWithTimeout, pull, PullOutcome, push, PushReport, requestInit, SyncContext, waitingUntil, WaitPolicy } from "./sync-engine.js";
import { TabCoordinator, TabMessage } from "./tabs.js";

/** A record as the app reads it: a plain JSON object with a string `id`. */
export type JsonRecord = { id: string; [field: string]: unknown };

/** Options of {@link DeltaSnapReplica.open}. */
export interface ReplicaOptions {
  /** The collection name, e.g. `"countries"`, or a partition `NAME/KEY` (`"sets/8271"`, PROTOCOL.md §10). */
  collection: string;
  /** The server root (scheme, host, port). Default: the page's origin. */
  serverURL?: string;
  /** URL of the bundled snapshot (`NAME.snapshot`, gzip) loaded at first start, offline. */
  bundledSnapshot?: string;
  /** With `trustedKeys`: URL of the bundled signed index (`NAME.index`). */
  bundledIndex?: string;
  /** Lines of pinned `signing.pub` files (`ed25519-public:…`). Set: sync through the signed index only. */
  trustedKeys?: string[];
  /** A bearer token (a per-user JWT), or a function returning the current one. Needed to push writes. */
  accessToken?: string | null | (() => string | null | Promise<string | null>);
  /** IndexedDB database name. Default `deltasnap:<collection>`. */
  databaseName?: string;
  /**
   * Where the replica is kept: `indexedDBStorage` (the default, a browser's IndexedDB and
   * localStorage) or a `MemoryStorage` (node, tests, a page that must keep nothing).
   */
  storage?: ReplicaStorage;
  /** Seconds between background syncs of the syncing tab; 0 turns polling off. Default 60. */
  pollInterval?: number;
  /**
   * Live mode instead of polling (PROTOCOL.md §11): the syncing tab keeps one request
   * waiting on the server's index, and a change is pulled within moments of its commit.
   * Falls back to polling when something in between cuts held requests.
   */
  live?: boolean | LiveOptions;
  /** Join the tab election and sync in the background. Default true. */
  autoSync?: boolean;
  /** Milliseconds before a request is abandoned. Default 30,000. */
  requestTimeout?: number;
  retryPolicy?: RetryPolicy;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
  /**
   * Ask the browser to keep this origin's storage (`navigator.storage.persist()`), so it is
   * not evicted under pressure. Browsers may refuse quietly; see `replica.persisted`.
   */
  persist?: boolean;
  /** When files the records refer to are downloaded: `eager` (the default), `lazy` or `none`. */
  attachments?: AttachmentPolicy;
  /** The most bytes of downloaded files kept, least recently used going first. Default: no limit. */
  attachmentCacheLimit?: number;
  /** The most bytes of files one sync downloads (a metered network); the rest waits. Default: no limit. */
  attachmentBudget?: number;
  /**
   * URL of the files bundled with the app (`deltasnap bake --attachments` writes them into
   * `attachments/`, each named by its SHA-256): a file is taken from there — checked like any
   * download — before it is asked of the server.
   */
  bundledAttachments?: string;
  /** Fields to index for {@link DeltaSnapReplica.query} and live queries (see `createIndex`). */
  indexes?: string[];
}

/**
 * A record's reference to a file, as it stands in the record (PROTOCOL.md §12.1):
 * `{"$attachment": "<sha256>", "size": N, "type": "<media type>"}`.
 */
export type AttachmentRef = { $attachment: string; size: number; type: string };

/** What one `sync()` did: the push step, then the pull, and the files. */
export interface SyncResult {
  push: PushReport;
  pull: PullOutcome;
  attachments: AttachmentReport;
}

/**
 * How the replica stands: `status` as the Swift client's, and the dot to show.
 * `indicator`: green = synced, nothing pending; amber = writes pending, never synced, or
 * failing for under an hour; red = failing for over an hour, or unverifiably old.
 */
export interface ReplicaStatus {
  status: "synced" | "retrying" | "failing" | "neverSynced" | "unverifiablyOld";
  indicator: "green" | "amber" | "red";
  /** Writes not yet accepted by the server. */
  queued: number;
  /** Writes accepted, waiting for the pull that brings them. */
  settling: number;
  lastSuccessfulSync: number | null;
  lastError: string | null;
  /** Why the last push stopped early (its writes stay queued and are retried), or null. */
  pushError: string | null;
  token: string | null;
  count: number;
  /** This tab is the one that syncs. */
  isSyncingTab: boolean;
}

/** Reported when the browser deleted the database since the last visit. */
export interface StorageLoss {
  /** Writes that were queued and are lost (0 when none was; unknown writes count as 0). */
  lostWrites: number;
}

/**
 * A collection (`NAME`) or a partition (`NAME/KEY`) as PROTOCOL.md §1 and §10.1 allow them.
 * Throws `DeltaSnapError("bad_collection_name")`.
 */
export function collectionPath(text: string): { name: string; key: string | null } {
  const match = /^([a-z0-9][a-z0-9_-]{0,63})(?:\/([A-Za-z0-9._:@-]{1,128}))?$/.exec(text);
  if (!match) throw new DeltaSnapError("bad_collection_name", `"${text}" is not a collection name ([a-z0-9][a-z0-9_-]{0,63}) or NAME/KEY (KEY: 1-128 of A-Za-z0-9._:@-)`);
  return { name: match[1], key: match[2] ?? null };
}

/** Syncing fails for this long before the dot turns red (as the Swift client). */
const FAILING_AFTER_MS = 3600_000;

/**
 * A browser replica of one DeltaSnap collection, kept in IndexedDB: usable offline at once
 * from the bundled snapshot, kept fresh with verified deltas, writable offline.
 *
 * Events (`addEventListener`): `change` (data changed, in this tab or another), `sync`
 * (`detail`: a {@link SyncResult}, in the syncing tab), `refused` (`detail`: the refused
 * writes, already rolled back, in every tab), `storage-lost` (`detail`: {@link StorageLoss}),
 * `progress` (`detail.phase`: `push`, `request`, `verify`, `commit`, in the syncing tab),
 * `leader` / `resign` (this tab starts / stops being the syncing one),
 * `attachment-progress` (`detail`: an {@link AttachmentProgress}, in every tab),
 * `error` (`detail`: a `DeltaSnapError`, e.g. an unusable bundle, or a full storage quota
 * while storing files: an `AttachmentError` with code `quota_exceeded`).
 *
 * ```ts
 * import { DeltaSnapReplica } from "./deltasnap.js";
 * const replica = await DeltaSnapReplica.open({ collection: "countries", bundledSnapshot: "/countries.snapshot" });
 * console.log(await replica.get("AD"));               // offline, at once
 * replica.addEventListener("change", () => render());
 * await replica.patch("AD", { capital: "Andorra la Vella" });   // visible at once, pushed later
 * ```
 */
export class DeltaSnapReplica extends EventTarget {
  /** Set when the database had been deleted by the browser since the last visit. */
  storageLoss: StorageLoss | null = null;
  /** With `persist`: whether the browser agreed to keep the storage (null: not asked, or no answer). */
  persisted: boolean | null = null;
  private readonly tabs: TabCoordinator;
  private running: Promise<SyncResult> | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** Live mode's loop, while this tab syncs; what the last index answer said. */
  private live: AbortController | null = null;
  private liveIndex: { etag: string | null; cursor: string | null } = { etag: null, cursor: null };
  private closed = false;
  private readonly earlyEvents: Event[] = [];
  private readonly files: ReplicaAttachments;
  private readonly queries: QueryEngine;
  private readonly stopListening: (() => void) | null;
  /** The most ids a change message to the other tabs names; a larger change says "any". */
  private static readonly CHANGE_IDS_LIMIT = 10_000;

  private constructor(
    readonly collection: string, private readonly store: ReplicaStore, private readonly storage: ReplicaStorage,
    private readonly ctx: SyncContext, private readonly options: ReplicaOptions,
  ) {
    super();
    this.tabs = new TabCoordinator(store.name, () => this.becameSyncingTab(), (m) => this.onTabMessage(m), (wasLeader, freezing) => this.suspended(wasLeader, freezing), () => this.store.resume());
    const openFiles = storage.openFiles ? () => storage.openFiles!(store.name) : async () => new MemoryFilesByName().open(store.name);
    this.files = new ReplicaAttachments(openFiles, ctx, (progress) => this.transferMoved(progress), {
      policy: options.attachments, cacheLimit: options.attachmentCacheLimit, budget: options.attachmentBudget, bundled: options.bundledAttachments,
    });
    ctx.beforePush = (batch) => this.files.uploadFor(batch);
    this.queries = new QueryEngine(store, (error) => this.dispatchEvent(new CustomEvent("error", { detail: error })));
    for (const field of options.indexes ?? []) this.queries.declare(field).catch((error) => this.dispatchEvent(new CustomEvent("error", { detail: error })));
    // Live queries follow every committed transaction, this tab's at once and the others' over
    // the BroadcastChannel, by the ids it changed.
    this.stopListening = store.onRecordsChanged?.((ids, values) => {
      this.queries.changed(ids, values);
      this.tabs.post({ type: "records", ids: ids !== null && ids.length <= DeltaSnapReplica.CHANGE_IDS_LIMIT ? ids : null });
    }) ?? null;
  }

  /** Opens (or creates) the replica; at first start, loads the bundled snapshot before returning. */
  static async open(options: ReplicaOptions): Promise<DeltaSnapReplica> {
    const collection = options.collection;
    const path = collectionPath(collection);
    const name = options.databaseName ?? `deltasnap:${collection}`;
    const storage = options.storage ?? indexedDBStorage;
    const { store, created } = await storage.open(name);
    const serverURL = (options.serverURL ?? globalThis.location?.origin ?? "").replace(/\/+$/, "");
    const fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    const token = options.accessToken;
    const trustedKeys = await Promise.all((options.trustedKeys ?? []).map((k) => TrustedKey.parse(k)));
    const ctx: SyncContext = {
      store, collection, serverURL, trustedKeys, fetch: fetcher,
      collectionURL: `${serverURL}/v1/collections/${path.name}` + (path.key === null ? "" : `/partitions/${encodeURIComponent(path.key)}`),
      accessToken: async () => (typeof token === "function" ? await token() : token ?? null),
      timeoutMs: options.requestTimeout ?? 30_000,
      retryPolicy: options.retryPolicy ?? DEFAULT_RETRY_POLICY,
      now: () => Date.now(),
    };
    const replica = new DeltaSnapReplica(collection, store, storage, ctx, options);
    ctx.onPhase = (phase) => replica.dispatchEvent(new CustomEvent("progress", { detail: { phase } }));
    replica.checkStorageLoss(created);
    if (options.persist) {
      try { replica.persisted = (await globalThis.navigator?.storage?.persist?.()) ?? null; } catch { replica.persisted = null; }
    }
    await replica.loadBundleIfEmpty();
    if (options.autoSync !== false) replica.tabs.start();
    // Events found while opening reach listeners the app adds once `open` resolved.
    const early = replica.earlyEvents.splice(0);
    setTimeout(() => early.forEach((e) => replica.dispatchEvent(e)), 0);
    return replica;
  }

  // MARK: - Reading

  /**
   * The record as the app sees it (pending local writes included), or `undefined`.
   * `T` is the app's record type (not checked: the data is whatever the server holds).
   */
  async get<T = JsonRecord>(id: string): Promise<T | undefined> {
    const body = await this.store.get(id);
    return body === null ? undefined : JSON.parse(body);
  }

  /** Every visible record (pending local writes included), sorted by id. */
  async all<T = JsonRecord>(): Promise<T[]> {
    return (await this.store.all()).map(([, body]) => JSON.parse(body));
  }

  /** Visible records for which `predicate` is true. */
  async filter<T = JsonRecord>(predicate: (record: T) => boolean): Promise<T[]> {
    return (await this.all<T>()).filter(predicate);
  }

  // MARK: - Queries

  /**
   * Indexes `field` (a dotted path) of the records for queries that filter on it (or order
   * on it with a limit). The index is kept in the database beside the records and changed
   * with them by every apply, in every tab: built once, from one read of every record, when
   * the database does not hold it yet — a page load after that reads none. It takes about the
   * records' room again (an entry holds its record, so a query reads its results from the
   * index's range alone). Queries asked after this call wait until it is built; it resolves
   * then. Also the `indexes` option of `open`.
   *
   * ```ts
   * replica.createIndex("region");
   * const europe = await replica.query(new ReplicaQuery().filter("region", "=", "Europe"));
   * ```
   */
  createIndex(field: string): Promise<void> {
    return this.queries.declare(field);
  }

  /** Removes the index on `field` from the database (for every tab: queries on it read every record). */
  dropIndex(field: string): Promise<void> {
    return this.queries.drop(field);
  }

  /**
   * The visible records (pending local writes included) `query` selects, in its order: the
   * Swift client's `ReplicaQuery` semantics. Through an index when a filter's field has one.
   *
   * ```ts
   * const cheap = await replica.query(new ReplicaQuery().filter("price", "<", 20).order("price").limit(50));
   * ```
   */
  async query<T = JsonRecord>(query: ReplicaQuery): Promise<T[]> {
    return (await this.queries.query(query)).map((row) => row.record as T);
  }

  /**
   * A query kept current, for `useSyncExternalStore(live.subscribe, live.getSnapshot)` or any
   * framework: see {@link LiveQuery}. A listener is called once with the first result, then
   * only when the result changed — after a pull, a local write (this tab's or another's), a
   * refused write's rollback or a full reset, never for changes that leave it as it was.
   */
  liveQuery<T = JsonRecord>(query: ReplicaQuery): LiveQuery<T> {
    return new LiveQuery<T>(query, this.queries);
  }

  /**
   * Calls `callback` with the result of `query` at once, then each time it changes (see
   * {@link liveQuery}); returns the unsubscribe.
   *
   * ```ts
   * const stop = replica.watch(new ReplicaQuery().filter("done", "=", false).order("due"), (todos) => render(todos));
   * // later: stop();
   * ```
   */
  watch<T = JsonRecord>(query: ReplicaQuery, callback: (records: T[]) => void): () => void {
    const live = this.liveQuery<T>(query);
    return live.subscribe(() => callback(live.getSnapshot()!));
  }

  /**
   * Resolves once every change heard so far has reached the live queries and their
   * callbacks ran: for tests, and for code that must see its write rendered before going on.
   */
  settled(): Promise<void> {
    return this.queries.settled();
  }

  /** How many times live queries ran again after changes (unrelated changes run none). */
  get liveQueryReruns(): number {
    return this.queries.reruns;
  }

  // MARK: - Writing (PROTOCOL.md §6 step 5)

  /** Replaces or creates record `id` with `value` (its `id`, if any, must be `id`). */
  put(id: string, value: object): Promise<PendingWrite> { return this.write("put", id, value); }
  /** Merges `fields` into record `id` (a `null` removes a field); the record must exist. */
  patch(id: string, fields: object): Promise<PendingWrite> { return this.write("patch", id, fields); }
  /** Creates record `id`; refused when it exists. */
  insert(id: string, value: object): Promise<PendingWrite> { return this.write("insert", id, value); }
  /** Hides record `id` (fine if it is already gone). */
  delete(id: string): Promise<PendingWrite> { return this.write("delete", id, null); }

  /**
   * Queues a write and shows it at once. Throws `WriteRefusedError` (nothing queued) when
   * the server could never accept it: an insert of an existing id, a patch of a missing
   * one, a value that is not an object or has `hidden`, or a different `id`.
   */
  private async write(op: Operation, id: string, value: object | null): Promise<PendingWrite> {
    let text: string | null = null;
    if (value !== null) {
      try { text = canonicalString(fromPlain(value)); } catch (error) { throw new WriteRefusedError("invalid_record", `the value for "${id}" is not JSON: ${(error as Error).message}`, id); }
      // The server refuses a write with a malformed reference (§12.1): refused here, before it is queued.
      let references: AttachmentReference[];
      try { references = referencesIn(text); } catch (error) { throw new WriteRefusedError("invalid_attachment", `the value for "${id}": ${(error as Error).message}`, id); }
      // A reference must prove its bytes (§12.2): a file this replica holds (attached here, or
      // downloaded) or one its records name. A hash alone — another user's — is refused
      // here, as the server would refuse it (missing_attachment), before it is queued.
      for (const r of references) {
        if (await this.files.hasBytes(r.sha256)) continue;
        if (await this.store.fileReference(r.sha256)) continue;
        throw new WriteRefusedError(
          "missing_attachment", `the value for "${id}" refers to attachment ${r.sha256}, which this replica neither holds nor reads in a record: attach the file first`, id);
      }
    }
    const write = await this.store.enqueue({ op, id, value: text }, Date.now());
    await this.rememberPending();
    this.changed("local-write");
    if (this.tabs.isLeader) this.schedule(50);
    return write;
  }

  /**
   * Pushes the queued writes without pulling (a view pulls only the partitions its index
   * says changed). Never throws for network or server problems: see the report.
   */
  async pushQueued(): Promise<PushReport> {
    const report = await push(this.ctx, "all");
    await this.rememberPending();
    if (report.refused.length) {
      this.dispatchEvent(new CustomEvent("refused", { detail: report.refused }));
      this.tabs.post({ type: "refused", writes: report.refused });
    }
    if (report.batches) this.changed("push");
    return report;
  }

  /** The name of this replica's IndexedDB database. */
  get databaseName(): string {
    return this.store.name;
  }

  /** The writes not settled yet, oldest first (queued, and accepted ones waiting for their pull). */
  pendingWrites(includeAccepted = true): Promise<PendingWrite[]> {
    return this.store.pendingWrites(includeAccepted);
  }

  // MARK: - Files (PROTOCOL.md §12)

  /**
   * Keeps `file` in this browser (OPFS, or IndexedDB blobs) and returns the reference to
   * put in a local write. Its upload is queued with the write and goes before the write is
   * pushed (resumable: a reload or a closed tab resumes from the server's offset); the file
   * is never evicted until the server holds it. Throws `AttachmentError` (`quota_exceeded`:
   * nothing changed) or `DeltaSnapError("invalid_attachment")` for a bad media type.
   *
   * ```ts
   * const photo = await notes.attach(input.files[0]);               // offline too
   * await notes.put("n1", { title: "Beach", photo });
   * img.src = await notes.attachmentURL(photo);                     // at once
   * ```
   */
  async attach(file: Blob, type?: string): Promise<AttachmentRef> {
    return referenceJSON(await this.files.attach(file, type || file.type || "application/octet-stream"));
  }

  /**
   * The proven bytes of a file a record refers to: held here, else downloaded now (whatever
   * the policy: `lazy` downloads here, once), resumed after a cut and checked against the
   * reference's SHA-256 before it is kept. Throws `AttachmentError`.
   */
  attachment(reference: AttachmentRef | AttachmentReference): Promise<Blob> {
    return this.files.blob(toReference(reference));
  }

  /** An object URL of the file (for an `<img src>`), the same one until the file goes or the replica closes. */
  attachmentURL(reference: AttachmentRef | AttachmentReference): Promise<string> {
    return this.files.objectURL(toReference(reference));
  }

  /** Every file the records (and queued writes) refer to and every file waiting for upload: `pending-upload`, `cached` or `remote`. */
  async attachmentStatuses(): Promise<AttachmentStatus[]> {
    return this.files.statuses(await this.referencedAttachments());
  }

  /** Sets when files are downloaded, from the next sync on. */
  setAttachmentPolicy(policy: AttachmentPolicy): void {
    this.files.policy = policy;
    this.files.needScan = true;
  }

  /** Sets the most bytes of downloaded files kept (null: no limit); applied now. */
  async setAttachmentCacheLimit(bytes: number | null): Promise<void> {
    this.files.cacheLimit = bytes;
    await this.files.release(await this.referencedAttachments());
  }

  /** Sets the most bytes of files one sync downloads (null: no limit), from the next sync on. */
  setAttachmentBudget(bytes: number | null): void {
    this.files.budget = bytes;
    this.files.needScan = true;
  }

  /** What the last sync did with files. */
  get lastAttachmentReport(): AttachmentReport {
    return { ...this.files.report, failures: [...this.files.report.failures] };
  }

  /**
   * Asks the browser to keep this origin's storage under pressure
   * (`navigator.storage.persist()`); true when it agreed. Ask after a user action (a
   * browser may refuse otherwise, quietly).
   */
  async requestPersistentStorage(): Promise<boolean> {
    try { this.persisted = (await globalThis.navigator?.storage?.persist?.()) ?? false; } catch { this.persisted = false; }
    return this.persisted;
  }

  /** The files the records and local values refer to: read from the store's index of references, never from every record. */
  private referencedAttachments(): Promise<Map<string, AttachmentReference>> {
    return this.store.referencedFiles();
  }

  private transferMoved(progress: AttachmentProgress): void {
    this.dispatchEvent(new CustomEvent("attachment-progress", { detail: progress }));
    this.tabs.post({ type: "attachment-progress", progress });
  }

  // MARK: - Syncing

  /**
   * Pushes the queued writes, then pulls (PROTOCOL.md §6 step 6). In a tab that is not
   * the syncing one it asks that tab to sync and resolves with `null`. Concurrent calls
   * share one run. Never throws for network or server problems: see the result.
   *
   * `waits`: `"all"` (the default: the server's `Retry-After`/`Backoff` and the backoff after
   * failures), `"serverRequested"` (a person pressing "sync now": only the server's wait),
   * `"none"` (an operator's override).
   */
  async sync(options: { waits?: WaitPolicy } = {}): Promise<SyncResult | null> {
    if (!this.tabs.isLeader && this.options.autoSync !== false) {
      this.tabs.post({ type: "sync-request" });
      return null;
    }
    if (this.running) return this.running;
    this.running = this.runSync(options.waits ?? "all").finally(() => { this.running = null; });
    return this.running;
  }

  private async runSync(waits: WaitPolicy): Promise<SyncResult> {
    const emptyPush: PushReport = { accepted: 0, refused: [], copied: [], batches: 0, failure: null, stillQueued: 0 };
    let result: SyncResult;
    this.files.report = emptyAttachmentReport();
    const wait = await waitingUntil(this.ctx, waits, "pull");
    if (wait !== null) {
      result = { push: { ...emptyPush, stillQueued: (await this.store.pendingWrites(false)).length }, pull: { kind: "deferred", until: wait }, attachments: this.files.report };
    } else {
      const pushed = await push(this.ctx, waits);
      // Writes accepted so far are in the state the pull brings: they leave the queue in the
      // pull's own transaction, never before, so they never flicker out of view.
      const settleThrough = Math.max(0, ...(await this.store.pendingWrites(true)).filter((w) => w.acked).map((w) => w.seq)) || null;
      // A wait the push's answer asked for holds the pull too.
      const serverWait = await waitingUntil(this.ctx, waits === "none" ? "none" : "serverRequested", "pull");
      const pulled: PullOutcome = serverWait !== null ? { kind: "deferred", until: serverWait } : await pull(this.ctx, settleThrough);
      if (pulled.kind !== "failed" && pulled.kind !== "deferred") {
        await this.files.notePull().catch(() => { this.files.needScan = true; });
        await this.settleFiles();
      }
      result = { push: pushed, pull: pulled, attachments: this.files.report };
    }
    await this.rememberPending();
    if (result.push.refused.length) {
      this.dispatchEvent(new CustomEvent("refused", { detail: result.push.refused }));
      this.tabs.post({ type: "refused", writes: result.push.refused });
    }
    if (result.push.batches || result.pull.kind !== "deferred") this.changed("sync");
    this.dispatchEvent(new CustomEvent("sync", { detail: result }));
    return result;
  }

  /** Downloads (eager) and releases files after a pull; a storage failure is reported, never thrown: the records stand. */
  private async settleFiles(): Promise<void> {
    try {
      const store = this.store;
      await this.files.settle({
        changes: () => store.fileChanges(),
        reference: (sha256) => store.fileReference(sha256),
        all: () => store.referencedFiles(),
        settled: (changes) => store.settleFileChanges(changes),
      });
    } catch (error) {
      this.files.report.failures.push((error as Error).message);
      this.files.needScan = true;
    }
    const quota = this.files.report.failures.find((f) => f.includes("quota is exhausted"));
    if (quota) this.dispatchEvent(new CustomEvent("error", { detail: new AttachmentError("quota_exceeded", quota) }));
  }

  /** How things stand, for the status dot and the queue view. */
  async status(): Promise<ReplicaStatus> {
    const now = Date.now();
    const state = await this.store.readState();
    const queue = await this.store.readQueue();
    const pending = await this.store.pendingWrites(true);
    const queued = pending.filter((w) => !w.acked).length;
    let status: ReplicaStatus["status"];
    if (state.indexExpires !== null && now / 1000 - state.indexExpires > ALLOWED_CLOCK_SKEW) status = "unverifiablyOld";
    else if (state.failingSince !== null) status = now - state.failingSince > FAILING_AFTER_MS ? "failing" : "retrying";
    else status = state.lastSuccessfulSync === null ? "neverSynced" : "synced";
    const pushFailingLong = queue?.pushFailingSince != null && now - queue.pushFailingSince > FAILING_AFTER_MS;
    const indicator = status === "failing" || status === "unverifiablyOld" || pushFailingLong ? "red" : pending.length > 0 || status !== "synced" ? "amber" : "green";
    return {
      status, indicator, queued, settling: pending.length - queued, lastSuccessfulSync: state.lastSuccessfulSync,
      lastError: state.lastError ?? null, pushError: queued > 0 ? queue?.lastPushError ?? null : null, token: state.token, count: state.count, isSyncingTab: this.tabs.isLeader,
    };
  }

  /**
   * Recomputes the count and the state checksum from every stored server record and
   * compares them with the ones kept (O(n); the syncs verify each apply already).
   */
  async verify(): Promise<{ ok: boolean; count: number; checksum: string; expected: { count: number; checksum: string } }> {
    const state = await this.store.readState();
    const records = await this.store.allServerRecords();
    const sum = new StateChecksum();
    for (const [, body] of records) sum.add(body);
    return {
      ok: sum.hex === state.checksum && records.length === state.count, count: records.length, checksum: sum.hex,
      expected: { count: state.count, checksum: state.checksum },
    };
  }

  /** Whether this tab is the one that syncs. */
  get isSyncingTab(): boolean {
    return this.tabs.isLeader;
  }

  /** Stops syncing in this tab (another tab takes over) and closes the database. */
  close(): void {
    this.closed = true;
    this.stopListening?.();
    this.files.close();
    this.stopLive();
    if (this.timer) clearTimeout(this.timer);
    globalThis.removeEventListener?.("online", this.onOnline);
    this.tabs.close();
    this.store.close();
  }

  // MARK: - Internals

  private becameSyncingTab(): void {
    this.dispatchEvent(new CustomEvent("leader"));
    // Back online: try at once rather than when the backoff after the failures ends.
    globalThis.addEventListener?.("online", this.onOnline);
    if (this.options.live) this.startLive(); else this.schedule(0);
  }

  /** Live mode in the syncing tab: wait on the index → sync when this collection moved → wait. */
  private startLive(): void {
    if (this.live || this.closed) return;
    const live = new AbortController();
    this.live = live;
    const options = this.options.live === true ? {} : this.options.live || {};
    void new LiveLoop(options).run((wait) => this.liveStep(wait, live.signal), live.signal);
  }

  private stopLive(): void {
    this.live?.abort();
    this.live = null;
  }

  /**
   * One round of live mode: a request that waits on the index (a plain sync when `wait` is
   * null), then a sync when this collection's token in it moved or writes are queued. The
   * index is a hint here, like a push notification: the sync verifies as any does.
   */
  private async liveStep(wait: number | null, signal: AbortSignal): Promise<LiveStep> {
    if (wait === null) return this.liveSync();
    const token = await this.ctx.accessToken();
    const headers: Record<string, string> = {};
    let url = `${this.ctx.serverURL}/v1/index?wait=${wait}`;
    if (this.liveIndex.etag !== null) {
      // With a token the index is the user's own, which no shared cache keeps: If-None-Match.
      // The public index's ETag goes in the URL, which a shared cache passes on (§11.2).
      if (token) headers["If-None-Match"] = this.liveIndex.etag;
      else url += `&etag=${encodeURIComponent(this.liveIndex.etag)}`;
    }
    if (this.liveIndex.cursor !== null) url += `&cursor=${encodeURIComponent(this.liveIndex.cursor)}`;
    const answer = await fetchTextWithTimeout(this.ctx.fetch, url, requestInit(token, "no-store", { headers, signal }), this.ctx.timeoutMs + wait * 1000);
    if (answer === null) return { kind: "failed" };
    const { response, text } = answer;
    const asked = serverDelay(response.headers.get("Retry-After"), response.headers.get("Backoff"), Date.now());
    if (response.status === 429 || response.status === 503) {
      return asked === null ? { kind: "failed" } : { kind: "deferred", until: Date.now() + asked * 1000 };
    }
    this.liveIndex.cursor = response.headers.get("DeltaSnap-Cursor") ?? this.liveIndex.cursor;
    if (response.status === 304) return { kind: "unchanged" };
    if (response.status !== 200 || text === null) return { kind: "failed" };
    let listed: string | null;
    try {
      // A hint, like a push notification: no check here; the sync it starts verifies.
      listed = (await readIndex(text, { trustedKeys: [], now: null, heldSequence: null })).entries.get(this.collection)?.token ?? null;
    } catch {
      return { kind: "failed" };
    }
    this.liveIndex.etag = response.headers.get("ETag");
    const held = (await this.store.readState()).token;
    if (listed === held && (await this.store.pendingWrites(false)).length === 0) return { kind: "unchanged" };
    return this.liveSync();
  }

  private async liveSync(): Promise<LiveStep> {
    const result = await this.sync();
    switch (result?.pull.kind) {
      case undefined: return { kind: "unchanged" };
      case "failed": return { kind: "failed" };
      case "deferred": return { kind: "deferred", until: result.pull.until };
      default: return { kind: "changed" };
    }
  }

  /**
   * This tab is being frozen or cached (or closed): a frozen tab ends its IndexedDB
   * transactions now — one held while frozen would block every other tab's — and a tab
   * that synced lets another tab sync from now on.
   */
  private suspended(wasLeader: boolean, freezing: boolean): void {
    // (An unloading page keeps its transactions: one committing a local write must finish.)
    if (freezing && !this.closed) this.store.suspend();
    if (!wasLeader) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.stopLive();
    globalThis.removeEventListener?.("online", this.onOnline);
    this.dispatchEvent(new CustomEvent("resign"));
  }

  private readonly onOnline = () => {
    if (this.closed || !this.tabs.isLeader) return;
    this.sync({ waits: "serverRequested" }).catch((error) => this.dispatchEvent(new CustomEvent("error", { detail: error })));
  };

  /** Runs a sync after `delayMs`, then keeps polling while this tab leads. */
  private schedule(delayMs: number): void {
    if (this.closed || !this.tabs.isLeader) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(async () => {
      this.timer = null;
      try { await this.sync(); } catch (error) { this.dispatchEvent(new CustomEvent("error", { detail: error })); }
      // In live mode the held request stands in for polling.
      const poll = this.options.live ? 0 : this.options.pollInterval ?? 60;
      const wait = await Promise.all([waitingUntil(this.ctx, "all", "pull"), waitingUntil(this.ctx, "all", "push")])
        .then(([a, b]) => (a === null ? b : b === null ? a : Math.min(a, b))).catch(() => null);
      const queued = (await this.store.pendingWrites(false).catch(() => [])).length;
      // Writes still queued are retried when the backoff ends, whatever the poll interval.
      const next = wait !== null ? wait - Date.now() : queued > 0 ? 5_000 : poll > 0 ? poll * 1000 : null;
      if (next !== null && !this.closed && !this.timer) this.timer = setTimeout(() => this.schedule(0), Math.max(0, next));
    }, delayMs);
  }

  private onTabMessage(message: TabMessage): void {
    switch (message.type) {
      case "changed":
        this.dispatchEvent(new CustomEvent("change", { detail: { reason: message.reason, remote: true } }));
        if (message.reason === "local-write" && this.tabs.isLeader) this.schedule(50);
        break;
      case "records":
        this.queries.changed(message.ids);
        break;
      case "sync-request":
        if (this.tabs.isLeader) this.schedule(0);
        break;
      case "refused":
        this.dispatchEvent(new CustomEvent("refused", { detail: message.writes }));
        break;
      case "attachment-progress":
        this.files.heardOfFiles();
        this.dispatchEvent(new CustomEvent("attachment-progress", { detail: message.progress }));
        break;
    }
  }

  private changed(reason: "local-write" | "sync" | "push"): void {
    // A store that cannot name the records it changed: every live query runs again.
    if (!this.store.onRecordsChanged) this.queries.changed(null);
    this.dispatchEvent(new CustomEvent("change", { detail: { reason, remote: false } }));
    this.tabs.post({ type: "changed", reason });
  }

  private async loadBundleIfEmpty(): Promise<void> {
    if (!this.options.bundledSnapshot) return;
    const state = await this.store.readState();
    if (state.token !== null) return;
    try {
      await loadBundledSnapshot(this.store, this.collection, this.options.bundledSnapshot, {
        trustedKeys: this.ctx.trustedKeys, indexURL: this.options.bundledIndex, fetch: this.ctx.fetch,
      });
    } catch (error) {
      if (!(error instanceof BundleError)) throw error;
      // The replica stays usable (empty until the first pull); the app hears why.
      this.earlyEvents.push(new CustomEvent("error", { detail: error }));
    }
  }

  /**
   * Storage loss: a marker in localStorage says this origin had a replica; a database that
   * had to be created anyway was evicted or deleted. The marker also counts the writes
   * that were queued, which are the only thing that cannot be rebuilt.
   */
  private checkStorageLoss(created: boolean): void {
    const key = this.markerKey();
    let marker: { pending?: number } | null = null;
    try { marker = JSON.parse(this.storage.markers?.getItem(key) ?? "null"); } catch { marker = null; }
    if (created && marker) {
      this.storageLoss = { lostWrites: marker.pending ?? 0 };
      this.earlyEvents.push(new CustomEvent("storage-lost", { detail: this.storageLoss }));
    }
    if (created || !marker) this.writeMarker(0);
  }

  private async rememberPending(): Promise<void> {
    this.writeMarker((await this.store.pendingWrites(false)).length);
  }

  private writeMarker(pending: number): void {
    try { this.storage.markers?.setItem(this.markerKey(), JSON.stringify({ pending })); } catch { /* no localStorage: loss goes unreported */ }
  }

  private markerKey(): string {
    return markerKey(this.store.name);
  }
}

/** A reference as a record holds it (or as the protocol module reads it). Throws `DeltaSnapError("invalid_attachment")`. */
function toReference(reference: AttachmentRef | AttachmentReference): AttachmentReference {
  if ("sha256" in reference) return reference;
  const parsed = parseReference(reference);
  if (!parsed) throw new DeltaSnapError("invalid_attachment", "not an attachment reference: it has no $attachment");
  return parsed;
}

/** The storage-loss marker's key of database `name`. */
export function markerKey(name: string): string {
  return `deltasnap-replica:${name}`;
}
