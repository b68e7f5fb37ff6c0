import { DeltaSnapError, TrustError } from "../protocol/errors.js";
import { indexedDBStorage } from "./indexeddb-store.js";
import { collectionPath, DeltaSnapReplica, JsonRecord, markerKey } from "./replica.js";
import { SignedIndex, TrustedKey } from "../protocol/signed-index.js";
import { readIndex } from "./index-client.js";
import { PendingWrite, ReplicaStorage } from "./store.js";
import { LiveLoop, LiveOptions, LiveStep } from "./live.js";
import { fetchTextWithTimeout, PullOutcome, PushReport, requestInit } from "./sync-engine.js";
import { TabCoordinator, TabMessage } from "./tabs.js";
import type { AttachmentPolicy } from "./attachments.js";

/** Options of {@link DeltaSnapView.open}. */
export interface ViewOptions {
  /** The user's bearer token (a JWT): its `sub` is the user whose view this is. */
  accessToken: string;
  /** The server root (scheme, host, port). Default: the page's origin. */
  serverURL?: string;
  /** Lines of pinned `signing.pub` files: the view and every partition must be signed by one. */
  trustedKeys?: string[];
  /** Prefix of the IndexedDB databases (one per partition) and the localStorage entry. Default `deltasnap-view`. */
  databasePrefix?: string;
  /** Milliseconds before a request is abandoned. Default 30,000. */
  requestTimeout?: number;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
  /** Where the partitions and the bookkeeping are kept: `indexedDBStorage` (the default) or a `MemoryStorage`. */
  storage?: ReplicaStorage;
  /** Each partition's file policy, cache limit and budget (see `ReplicaOptions`). */
  attachments?: AttachmentPolicy;
  attachmentCacheLimit?: number;
  attachmentBudget?: number;
}

/** What one {@link DeltaSnapView.sync} did. */
export interface ViewSyncReport {
  /** `not-modified` (a 304), `applied` (a new view was read), or why it failed (nothing was fetched or dropped). */
  index: { kind: "not-modified" } | { kind: "applied" } | { kind: "failed"; reason: string; unavailable: boolean };
  /** Per partition with queued writes: what its push did. */
  pushes: Record<string, PushReport>;
  /** Per partition whose token moved: what its pull did. */
  partitions: Record<string, PullOutcome>;
  /** Per partition that left the view (a revoked membership): its queued writes, dropped with it. */
  dropped: Record<string, PendingWrite[]>;
  /** Partitions held after the sync. */
  held: string[];
}

/** What the view keeps between syncs (localStorage): the last view applied. */
interface ViewBookkeeping {
  server: string;
  etag: string | null;
  sequence: string | null;
  partitions: string[];
}

/**
 * A user's whole view (PROTOCOL.md §10.3) in the browser: the public collections and every
 * partition the token may read, each partition a {@link DeltaSnapReplica} in an IndexedDB
 * database of its own (verified and applied in its own transaction). One request to
 * `GET /v1/index` tells what changed; only those partitions are fetched; a partition that
 * left the view is deleted from the browser and its queued writes reported.
 *
 * ```ts
 * import { DeltaSnapView } from "./deltasnap.js";
 * const view = await DeltaSnapView.open({ accessToken: session.jwt });
 * const report = await view.sync();                       // pushes each queue, asks once
 * const sets = await view.query("sets");                  // records of every sets/* held
 * await (await view.replica("attempts/alice")).insert("a-42", { score: 3 });
 * ```
 *
 * The view syncs when the app calls {@link sync} (its replicas do not poll on their own):
 * call it on a timer or when the page becomes visible, from one tab.
 */
export class DeltaSnapView extends EventTarget {
  private readonly replicas = new Map<string, DeltaSnapReplica>();
  private running: Promise<ViewSyncReport> | null = null;
  /** Live mode: the election among this view's tabs, and the loop while this tab leads it. */
  private tabs: TabCoordinator | null = null;
  private live: AbortController | null = null;
  private readonly storage: ReplicaStorage;

  private constructor(
    readonly subject: string, private readonly options: ViewOptions, private readonly serverURL: string,
    private readonly trustedKeys: TrustedKey[], private readonly fetcher: typeof fetch,
  ) {
    super();
    this.storage = options.storage ?? indexedDBStorage;
  }

  /** Opens the view of `accessToken`'s user (its databases, if any, from an earlier visit). */
  static async open(options: ViewOptions): Promise<DeltaSnapView> {
    const subject = jwtSubject(options.accessToken);
    if (subject === null) throw new DeltaSnapError("bad_token", "the access token is not a JWT with a `sub`: a view is a user's");
    const serverURL = (options.serverURL ?? globalThis.location?.origin ?? "").replace(/\/+$/, "");
    const trustedKeys = await Promise.all((options.trustedKeys ?? []).map((k) => TrustedKey.parse(k)));
    const view = new DeltaSnapView(subject, options, serverURL, trustedKeys, options.fetch ?? globalThis.fetch.bind(globalThis));
    const held = view.bookkeeping();
    if (held.server !== "" && held.server !== serverURL) {
      throw new DeltaSnapError("other_server", `this view was synced with ${held.server}, not ${serverURL}`);
    }
    return view;
  }

  /** The partitions (and collections) held in this browser, sorted. */
  partitions(): string[] {
    return [...this.bookkeeping().partitions].sort();
  }

  /** The replica of one partition of the view (`"sets/8271"`), for its reads and local writes. */
  async replica(partition: string): Promise<DeltaSnapReplica> {
    collectionPath(partition);
    const open = this.replicas.get(partition);
    if (open) return open;
    const replica = await DeltaSnapReplica.open({
      collection: partition, serverURL: this.serverURL, accessToken: () => this.options.accessToken,
      trustedKeys: this.options.trustedKeys, databaseName: this.databaseName(partition), autoSync: false, pollInterval: 0,
      requestTimeout: this.options.requestTimeout, fetch: this.fetcher, storage: this.storage,
      attachments: this.options.attachments, attachmentCacheLimit: this.options.attachmentCacheLimit, attachmentBudget: this.options.attachmentBudget,
    });
    this.replicas.set(partition, replica);
    return replica;
  }

  /** The records of every held partition of collection `name` (and `name` itself), local writes included. */
  async query<T = JsonRecord>(name: string, predicate: (record: T) => boolean = () => true): Promise<T[]> {
    const results: T[] = [];
    for (const partition of this.partitions()) {
      if (partition !== name && !partition.startsWith(name + "/")) continue;
      results.push(...(await (await this.replica(partition)).filter<T>(predicate)));
    }
    return results;
  }

  /**
   * Pushes every held partition's queued writes, asks the server once whether the view
   * changed, pulls what did, and drops what left it. Never throws for network or server
   * problems: see the report. Concurrent calls share one run.
   *
   * `wait` (seconds, 1–60): when the view is held, the server holds the question until the
   * view changes or the wait ends (PROTOCOL.md §11) — what live mode does.
   */
  sync(options: { wait?: number; signal?: AbortSignal } = {}): Promise<ViewSyncReport> {
    if (!this.running) this.running = this.runSync(options.wait ?? null, options.signal).finally(() => { this.running = null; });
    return this.running;
  }

  /**
   * Live mode: waits on the server for a change to the view, syncs it, and waits again,
   * until {@link stopLive} or {@link close}. Call it in every tab: one of them runs the loop
   * (the one holding the Web Lock `deltasnap-sync:view:<prefix>:<sub>`, see "Tabs"), the
   * next takes over when it closes or is frozen, and after each sync that changed the view
   * every other tab fires `change` to re-read. Falls back to polling when held requests are
   * cut (see {@link LiveOptions}). Local writes are pushed by the app's own `sync()` —
   * which, while a request waits, joins it — or by the next round.
   *
   * ```ts
   * view.addEventListener("change", () => render());    // this tab's syncs and the live tab's
   * view.startLive({ wait: 30 });
   * ```
   */
  startLive(options: LiveOptions = {}): void {
    if (this.tabs) return;
    const tabs = new TabCoordinator(
      `view:${this.bookkeepingKey()}`, () => this.runLive(options), (message) => this.onTabMessage(message),
      (wasLeader) => { if (wasLeader) this.endLoop(); });
    this.tabs = tabs;
    tabs.start();
  }

  /** Ends live mode in this tab (another tab in live mode takes over); a waiting request is abandoned. */
  stopLive(): void {
    this.tabs?.close();
    this.tabs = null;
    this.endLoop();
  }

  /** Whether this tab runs the view's live mode (one tab does). */
  get isLiveTab(): boolean {
    return this.tabs?.isLeader ?? false;
  }

  private runLive(options: LiveOptions): void {
    if (this.live) return;
    const live = new AbortController();
    this.live = live;
    void new LiveLoop(options).run(async (wait): Promise<LiveStep> => {
      const report = await this.sync({ wait: wait ?? undefined, signal: live.signal });
      switch (report.index.kind) {
        case "applied":
          this.tabs?.post({ type: "changed", reason: "sync" });
          return { kind: "changed" };
        case "not-modified": return { kind: "unchanged" };
        case "failed": return { kind: "failed" };
      }
    }, live.signal);
  }

  private endLoop(): void {
    this.live?.abort();
    this.live = null;
  }

  /** Another tab's live mode applied a new view: re-read (a dropped partition's database is gone). */
  private onTabMessage(message: TabMessage): void {
    if (message.type !== "changed") return;
    const held = new Set(this.partitions());
    for (const [partition, replica] of this.replicas) {
      if (held.has(partition)) continue;
      replica.close();
      this.replicas.delete(partition);
    }
    this.dispatchEvent(new CustomEvent("change", { detail: { remote: true } }));
  }

  /** Closes every partition's database (and ends live mode). */
  close(): void {
    this.stopLive();
    for (const replica of this.replicas.values()) replica.close();
    this.replicas.clear();
  }

  private async runSync(wait: number | null, signal?: AbortSignal): Promise<ViewSyncReport> {
    const report: ViewSyncReport = { index: { kind: "not-modified" }, pushes: {}, partitions: {}, dropped: {}, held: [] };
    const held = this.bookkeeping();
    for (const partition of held.partitions) {
      const replica = await this.replica(partition);
      if ((await replica.pendingWrites(false)).length > 0) report.pushes[partition] = await replica.pushQueued();
    }
    const answer = await this.fetchView(held, wait, signal);
    if (answer.kind !== "fetched") {
      report.index = answer;
      report.held = this.partitions();
      this.dispatchEvent(new CustomEvent("sync", { detail: report }));
      return report;
    }
    const { index, etag } = answer;
    let complete = true;
    const listed = [...index.entries.keys()];
    for (const [partition, entry] of index.entries) {
      const replica = await this.replica(partition);
      if ((await replica.status()).token === entry.token) continue;
      const result = await replica.sync({ waits: "serverRequested" });
      const outcome = result?.pull ?? { kind: "deferred", until: Date.now() };
      report.partitions[partition] = outcome;
      if (outcome.kind === "failed" || outcome.kind === "deferred") complete = false;
    }
    for (const partition of held.partitions) {
      if (listed.includes(partition) || collectionPath(partition).key === null) continue;
      report.dropped[partition] = await this.drop(partition);
    }
    report.index = { kind: "applied" };
    // Only a view applied in full is remembered: a partition that failed is asked again.
    const partitions = [...new Set([...listed, ...held.partitions.filter((p) => collectionPath(p).key === null && !listed.includes(p))])].sort();
    this.saveBookkeeping({
      server: this.serverURL, etag: complete ? etag : held.etag, sequence: index.sequence.toString(), partitions,
    });
    report.held = partitions;
    if (listed.length || Object.keys(report.dropped).length) this.dispatchEvent(new CustomEvent("change", { detail: report }));
    this.dispatchEvent(new CustomEvent("sync", { detail: report }));
    return report;
  }

  /** `GET /v1/index` with the token and the held ETag; a new view is checked before use. */
  private async fetchView(held: ViewBookkeeping, wait: number | null, signal?: AbortSignal): Promise<
    { kind: "not-modified" } | { kind: "failed"; reason: string; unavailable: boolean } | { kind: "fetched"; index: SignedIndex; etag: string | null }
  > {
    const headers: Record<string, string> = {};
    if (held.etag) headers["If-None-Match"] = held.etag;
    // A view is private: no shared cache sits in between, so If-None-Match reaches the server.
    const waitSeconds = wait !== null && held.etag !== null ? Math.min(60, Math.max(1, Math.floor(wait))) : null;
    const url = this.serverURL + "/v1/index" + (waitSeconds !== null ? `?wait=${waitSeconds}` : "");
    const timeout = (this.options.requestTimeout ?? 30_000) + (waitSeconds ?? 0) * 1000;
    // With the token: `no-store` (requestInit), never kept by the browser's HTTP cache.
    const answer = await fetchTextWithTimeout(this.fetcher, url, requestInit(this.options.accessToken, "no-store", { headers, signal }), timeout);
    if (answer === null) return { kind: "failed", reason: "view request failed: no answer (network error or timeout)", unavailable: true };
    const { response, text } = answer;
    try {
      if (response.status === 304) return { kind: "not-modified" };
      if (response.status !== 200) {
        return { kind: "failed", reason: `view: status ${response.status}`, unavailable: response.status === 408 || response.status === 429 || response.status >= 500 };
      }
      if (text === null) return { kind: "failed", reason: "view request failed: the body broke off", unavailable: true };
      const index = await readIndex(text, {
        trustedKeys: this.trustedKeys, now: Math.floor(Date.now() / 1000), heldSequence: held.sequence === null ? null : BigInt(held.sequence),
        subject: this.subject,
      });
      return { kind: "fetched", index, etag: response.headers.get("ETag") };
    } catch (error) {
      if (error instanceof TrustError) return { kind: "failed", reason: `view refused: ${error.message}`, unavailable: false };
      return { kind: "failed", reason: `view request failed: ${(error as Error).message}`, unavailable: true };
    }
  }

  /** Deletes a partition that left the view: its database, with its queued writes (returned). */
  private async drop(partition: string): Promise<PendingWrite[]> {
    const replica = await this.replica(partition);
    const lost = await replica.pendingWrites(false);
    const name = replica.databaseName;
    replica.close();
    this.replicas.delete(partition);
    await this.storage.delete(name);
    // Not a storage loss: the replica's marker goes with it.
    try { this.storage.markers?.removeItem(markerKey(name)); } catch { /* no localStorage */ }
    return lost;
  }

  private databaseName(partition: string): string {
    return `${this.options.databasePrefix ?? "deltasnap-view"}:${this.subject}:${partition}`;
  }

  private bookkeepingKey(): string {
    return `${this.options.databasePrefix ?? "deltasnap-view"}:${this.subject}`;
  }

  private bookkeeping(): ViewBookkeeping {
    try {
      const held = JSON.parse(this.storage.markers?.getItem(this.bookkeepingKey()) ?? "null");
      if (held && Array.isArray(held.partitions)) return held;
    } catch { /* unreadable: start afresh */ }
    return { server: "", etag: null, sequence: null, partitions: [] };
  }

  private saveBookkeeping(held: ViewBookkeeping): void {
    try { this.storage.markers?.setItem(this.bookkeepingKey(), JSON.stringify(held)); } catch { /* no localStorage: asked afresh next time */ }
  }
}

/** The `sub` claim of a JWT (not verified: the server does that), or null. */
export function jwtSubject(token: string): string | null {
  const payload = token.split(".")[1];
  if (!payload) return null;
  try {
    const binary = atob(payload.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(payload.length / 4) * 4, "="));
    const sub = JSON.parse(new TextDecoder().decode(Uint8Array.from(binary, (c) => c.charCodeAt(0)))).sub;
    return typeof sub === "string" && sub !== "" ? sub : null;
  } catch {
    return null;
  }
}
