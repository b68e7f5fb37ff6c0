import { verifyBody, VerifiedApply } from "./apply.js";
import { isBodyProblem, parseBody } from "../protocol/body.js";
import { BodyError, DeltaSnapError, TrustError } from "../protocol/errors.js";
import { decideAfterUnusableBody, decidePullAnswer, decidePushAnswer, isUnavailable, PullStep } from "../protocol/ladder.js";
import { StateDigest } from "../protocol/lthash.js";
import { DEFAULT_RETRY_POLICY, retryDelay, RetryPolicy, serverDelay } from "../protocol/retry.js";
import { SignedIndex, TrustedKey } from "../protocol/signed-index.js";
import { readIndex } from "./index-client.js";
import { PendingWrite, ReplicaState, ReplicaStore, StateMovedError } from "./store.js";
import { Operation } from "../protocol/merge.js";

/** What a pull did. */
export type PullOutcome =
  | { kind: "not-modified" }
  /**
   * A delta or full body was applied; `changedIds` lists a delta's ids (empty for a full
   * body); `mentionsFiles`: a record it brought refers to an attachment.
   */
  | { kind: "applied"; full: boolean; changedIds: string[]; count: number; mentionsFiles: boolean }
  /** The answer could not be applied; a full fetch replaced the collection. */
  | { kind: "reset"; reason: string; count: number; mentionsFiles: boolean }
  /** Nothing changed; the data held is kept. `retryAt`: the earliest next attempt (ms). */
  | { kind: "failed"; reason: string; code: string; unavailable: boolean; retryAt: number | null }
  /** Not tried: a wait (the server's, or the backoff) runs until `until` (ms). */
  | { kind: "deferred"; until: number };

/** A write the server refused: already rolled back locally. */
export interface RefusedWrite {
  seq: number;
  op: Operation;
  id: string;
  code: string;
  message: string;
}

/** What the push step of a sync did. */
export interface PushReport {
  accepted: number;
  refused: RefusedWrite[];
  /** Writes committed as conflict copies (collections merged by `fork`): [write id, copy id]. */
  copied: [string, string][];
  batches: number;
  /** Why pushing stopped early (the writes stay queued), or null. */
  failure: string | null;
  stillQueued: number;
}

/** Everything a sync needs, supplied by the replica. */
export interface SyncContext {
  store: ReplicaStore;
  collection: string;
  /** The collection endpoint, e.g. `https://data.example.com/v1/collections/countries`. */
  collectionURL: string;
  /** The server root, e.g. `https://data.example.com` (for `/v1/index`). */
  serverURL: string;
  trustedKeys: TrustedKey[];
  accessToken: () => Promise<string | null>;
  fetch: typeof fetch;
  timeoutMs: number;
  retryPolicy: RetryPolicy;
  now: () => number;
  /** Told when a pull reaches its next phase (for a progress indicator). */
  onPhase?: (phase: SyncPhase) => void;
  /**
   * Runs before each push batch is sent (the uploads of the files its writes refer to);
   * returns why the batch must wait (its writes stay queued), or null.
   */
  beforePush?: (batch: PendingWrite[]) => Promise<string | null>;
}

/** Where a sync stands: pushing, requesting, verifying a body, committing it. */
export type SyncPhase = "push" | "request" | "verify" | "commit";

const MAX_BATCH = 500;
const MAX_BATCH_BYTES = 512 * 1024;

/**
 * `fetch` with a timeout; `null` for a network error or a timeout (the caller retries later),
 * or when `init.signal` aborts it (live mode stopped while a request waited).
 */
export function fetchWithTimeout(fetcher: typeof fetch, url: string, init: RequestInit, timeoutMs: number): Promise<Response | null> {
  return withTimeout(fetcher, url, init, timeoutMs, async (response) => response);
}

/**
 * {@link fetchWithTimeout} that reads a `200`'s body within the same timeout (a small
 * document such as the index, which a stalled server must not hold for ever); `text` is
 * `null` for other statuses or a body that broke off.
 */
export function fetchTextWithTimeout(
  fetcher: typeof fetch, url: string, init: RequestInit, timeoutMs: number,
): Promise<{ response: Response; text: string | null } | null> {
  return withTimeout(fetcher, url, init, timeoutMs, async (response) => ({ response, text: response.status === 200 ? await readText(response) : null }));
}

async function withTimeout<T>(
  fetcher: typeof fetch, url: string, init: RequestInit, timeoutMs: number, read: (response: Response) => Promise<T>,
): Promise<T | null> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  init.signal?.addEventListener("abort", () => abort.abort(), { once: true });
  if (init.signal?.aborted) abort.abort();
  try {
    return await read(await fetcher(url, { ...init, signal: abort.signal }));
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

function request(ctx: SyncContext, url: string, init: RequestInit): Promise<Response | null> {
  return fetchWithTimeout(ctx.fetch, url, init, ctx.timeoutMs);
}

/** Reads a response's text, `null` when the body breaks off. */
async function readText(response: Response): Promise<string | null> {
  try { return await response.text(); } catch { return null; }
}

/** A request's init without its cache mode (which {@link requestInit} decides), headers as a record. */
export type RequestParts = Omit<RequestInit, "headers" | "cache"> & { headers?: Record<string, string> };

/**
 * The init of every request to the server — the one place that decides how the browser's
 * HTTP cache takes part. A request that carries the bearer token (a user's view, a
 * partition, a private collection) is `no-store`: the browser's cache neither answers it nor
 * keeps the answer — not even one an older server marked `immutable` — so nothing private
 * outlives access on the device. The replica in IndexedDB is the client's cache, and a view
 * deletes a partition that left it. A request without a token (public data) keeps
 * `publicCache`: the collection poll is `no-store`, the public index and the token-named
 * `…/snapshots/`, `…/deltas/` URLs go through the browser's (and any shared) cache.
 */
export function requestInit(token: string | null, publicCache: RequestCache, init: RequestParts = {}): RequestInit {
  const headers: Record<string, string> = { ...init.headers };
  if (token) headers.Authorization = `Bearer ${token}`;
  return { ...init, headers, cache: token ? "no-store" : publicCache };
}

/** {@link requestInit} with the context's current token. */
async function initFor(ctx: SyncContext, publicCache: RequestCache, init: RequestParts = {}): Promise<RequestInit> {
  return requestInit(await ctx.accessToken(), publicCache, init);
}

function askedUntil(response: Response | null, now: number): number | null {
  if (!response) return null;
  const asked = serverDelay(response.headers.get("Retry-After"), response.headers.get("Backoff"), now);
  return asked === null ? null : now + asked * 1000;
}

function successState(now: number, serverNotBefore: number | null): Partial<ReplicaState> {
  return { lastSuccessfulSync: now, failingSince: null, failures: 0, notBefore: null, lastError: null, serverNotBefore };
}

async function recordFailure(ctx: SyncContext, reason: string, code: string, unavailable: boolean, serverNotBefore: number | null): Promise<PullOutcome> {
  const now = ctx.now();
  const held = await ctx.store.readState();
  const failures = held.failures + 1;
  const asked = serverNotBefore === null ? null : Math.max(0, (serverNotBefore - now) / 1000);
  const notBefore = now + retryDelay(failures, asked, Math.random(), ctx.retryPolicy) * 1000;
  await ctx.store.updateState({
    failures, failingSince: held.failingSince ?? now, notBefore, lastError: reason,
    serverNotBefore: serverNotBefore ?? held.serverNotBefore,
  });
  return { kind: "failed", reason, code, unavailable, retryAt: notBefore };
}

/**
 * Which waits a sync respects (as the Swift client's `WaitPolicy`): `all` — the server's
 * (`Retry-After`/`Backoff`) and the replica's own backoff after failures (an app syncing in
 * the background); `serverRequested` — only the server's (a person pressing "sync now": a
 * network error is retried at once, the server's wait is not); `none` — an operator's override.
 */
export type WaitPolicy = "all" | "serverRequested" | "none";

/** The wait still running before a request (`push`: the push's own backoff, else the pull's), if any. */
export async function waitingUntil(ctx: SyncContext, waits: WaitPolicy, step: "pull" | "push"): Promise<number | null> {
  if (waits === "none") return null;
  const state = await ctx.store.readState();
  let until = state.serverNotBefore ?? 0;
  if (waits === "all") {
    const own = step === "pull" ? state.notBefore : (await ctx.store.readQueue())?.pushNotBefore;
    until = Math.max(until, own ?? 0);
  }
  return until > ctx.now() ? until : null;
}

/**
 * Pulls once (PROTOCOL.md §6 steps 2–3, or §8.4 with trusted keys) and settles the writes
 * accepted up to `settleThrough` in the transaction that stores the pulled state.
 */
export async function pull(ctx: SyncContext, settleThrough: number | null): Promise<PullOutcome> {
  ctx.onPhase?.("request");
  return ctx.trustedKeys.length ? signedPull(ctx, settleThrough) : plainPull(ctx, settleThrough);
}

async function plainPull(ctx: SyncContext, settleThrough: number | null): Promise<PullOutcome> {
  const held = await ctx.store.readState();
  const headers: Record<string, string> = {};
  if (held.token !== null) {
    if (held.etag) headers["If-None-Match"] = held.etag;
    if (held.lastModified) headers["If-Modified-Since"] = held.lastModified;
  }
  // `no-store` with or without a token: the browser's HTTP cache must neither answer for the
  // server nor turn our validators into its own; the 304 reaches this code as a 304.
  const response = await request(ctx, ctx.collectionURL, await initFor(ctx, "no-store", { headers }));
  return answerPull(ctx, "conditional", response, held, settleThrough, null);
}

async function answerPull(ctx: SyncContext, step: PullStep, response: Response | null, held: ReplicaState, settleThrough: number | null, firstReason: string | null): Promise<PullOutcome> {
  const now = ctx.now();
  const serverNotBefore = askedUntil(response, now);
  const decision = decidePullAnswer(step, response?.status ?? null);
  const prefix = firstReason ? `${firstReason}; full fetch: ` : "";
  if (decision.action === "not-modified") {
    await ctx.store.updateState({
      etag: response!.headers.get("ETag") ?? held.etag, lastModified: response!.headers.get("Last-Modified") ?? held.lastModified,
      ...successState(now, serverNotBefore),
    }, settleThrough);
    return { kind: "not-modified" };
  }
  if (decision.action === "keep") return recordFailure(ctx, prefix + decision.reason, "http_" + (response?.status ?? "network"), decision.unavailable, serverNotBefore);
  let verified: VerifiedApply;
  try {
    const text = await readText(response!);
    if (text === null) throw new BodyError("unreadable_body", "the body broke off (or its gzip is damaged)");
    ctx.onPhase?.("verify");
    const body = parseBody(text, ctx.collection);
    verified = await verifyBody(body, held, ctx.store, ctx.collection, {
      expectFull: step === "full", maintainDigest: false,
      etag: response!.headers.get("ETag"), lastModified: response!.headers.get("Last-Modified"),
    });
  } catch (error) {
    if (!isBodyProblem(error)) throw error;
    const reason = (error as Error).message;
    if (decideAfterUnusableBody(step) === "full-fetch") {
      const full = await request(ctx, ctx.collectionURL, await initFor(ctx, "no-store"));
      return answerPull(ctx, "full", full, held, settleThrough, reason);
    }
    return recordFailure(ctx, prefix + reason, (error as DeltaSnapError).code, false, serverNotBefore);
  }
  return commit(ctx, verified, settleThrough, serverNotBefore, firstReason);
}

async function commit(ctx: SyncContext, verified: VerifiedApply, settleThrough: number | null, serverNotBefore: number | null, resetReason: string | null, extra: Partial<ReplicaState> = {}): Promise<PullOutcome> {
  ctx.onPhase?.("commit");
  verified.prepared.state = { ...verified.prepared.state, ...successState(ctx.now(), serverNotBefore), ...extra };
  try {
    await ctx.store.commitApply(verified.prepared, settleThrough);
  } catch (error) {
    if (error instanceof StateMovedError) return { kind: "failed", reason: "another tab applied a body meanwhile; the next sync continues from it", code: "state_moved", unavailable: false, retryAt: null };
    throw error;
  }
  // Records are in memory here: finding a reference costs a substring search, not a re-read.
  const mentionsFiles = verified.prepared.upserts.some(([, body]) => body.includes('"$attachment"'));
  if (resetReason !== null) return { kind: "reset", reason: resetReason, count: verified.count, mentionsFiles };
  return { kind: "applied", full: verified.prepared.replaceAll, changedIds: verified.changedIds, count: verified.count, mentionsFiles };
}

// MARK: - Signed data (§8.4)

function encodeSegment(token: string): string {
  return encodeURIComponent(token).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

type IndexFailure = { reason: string; code: string; unavailable: boolean; serverNotBefore: number | null };

/** `GET /v1/index`, verified (§8.4 step 1); a failure is recorded (backoff) and returned. */
async function fetchIndex(ctx: SyncContext, held: ReplicaState, revalidate: boolean): Promise<{ index: SignedIndex; response: Response } | PullOutcome> {
  let answer = await fetchIndexOnce(ctx, held, revalidate ? "no-cache" : "default");
  // A refused index may be a damaged copy the browser's cache keeps under the genuine ETag
  // (a revalidation would only confirm it): fetch it whole from the network, once.
  if ("failure" in answer && answer.failure.code !== "index_unavailable") answer = await fetchIndexOnce(ctx, held, "reload");
  if ("failure" in answer) {
    const f = answer.failure;
    return recordFailure(ctx, f.reason, f.code, f.unavailable, f.serverNotBefore);
  }
  return answer;
}

async function fetchIndexOnce(ctx: SyncContext, held: ReplicaState, cache: RequestCache): Promise<{ index: SignedIndex; response: Response } | { failure: IndexFailure }> {
  const now = ctx.now();
  const response = await request(ctx, ctx.serverURL + "/v1/index", await initFor(ctx, cache));
  const serverNotBefore = askedUntil(response, now);
  if (!response || response.status !== 200) {
    const status = response?.status ?? null;
    return { failure: { reason: `index: ${status === null ? "no answer from the server" : `status ${status}`}`, code: "index_unavailable", unavailable: status === null || isUnavailable(status), serverNotBefore } };
  }
  const text = await readText(response);
  try {
    if (text === null) throw new TrustError("bad_index", "the index broke off");
    const index = await readIndex(text, {
      trustedKeys: ctx.trustedKeys, now: Math.floor(now / 1000), heldSequence: held.indexSequence === null ? null : BigInt(held.indexSequence),
      collection: ctx.collection,
    });
    return { index, response };
  } catch (error) {
    if (!(error instanceof TrustError)) throw error;
    return { failure: { reason: `refused the index: ${error.message}`, code: error.code, unavailable: false, serverNotBefore } };
  }
}

async function signedPull(ctx: SyncContext, settleThrough: number | null): Promise<PullOutcome> {
  let held = await ctx.store.readState();
  let fetched = await fetchIndex(ctx, held, false);
  if (!("index" in fetched)) return fetched;
  let { index } = fetched;
  // Store the verified sequence; an equal sequence only ever moves the expiry later.
  const acceptIndex = async (i: SignedIndex) => {
    const sameSequence = held.indexSequence !== null && BigInt(held.indexSequence) === i.sequence;
    const expires = sameSequence ? Math.max(held.indexExpires ?? 0, Number(i.expires)) : Number(i.expires);
    held = await ctx.store.updateState({ indexSequence: i.sequence.toString(), indexExpires: expires });
  };
  await acceptIndex(index);
  let entry = index.entries.get(ctx.collection)!;
  const now = ctx.now();
  if (held.token === entry.token && held.lanes && (await new StateDigest(held.lanes).fingerprint()) === entry.digest) {
    await ctx.store.updateState(successState(now, askedUntil(fetched.response, now)), settleThrough);
    return { kind: "not-modified" };
  }
  const bodyURL = (target: string, base: string | null) =>
    `${ctx.collectionURL}/` + (base === null ? `snapshots/${encodeSegment(target)}` : `deltas/${encodeSegment(base)}/${encodeSegment(target)}`);
  let response = await request(ctx, bodyURL(entry.token, held.token), await initFor(ctx, "default"));
  if (response?.status === 404 && (await errorCode(response.clone())) === "superseded") {
    // A cache may have served an older index: revalidate it once and retry once.
    fetched = await fetchIndex(ctx, held, true);
    if (!("index" in fetched)) return fetched;
    index = fetched.index;
    await acceptIndex(index);
    entry = index.entries.get(ctx.collection)!;
    response = await request(ctx, bodyURL(entry.token, held.token), await initFor(ctx, "default"));
  }
  const tryApply = async (r: Response | null, expectFull: boolean): Promise<VerifiedApply | string> => {
    if (!r || r.status !== 200) return `status ${r?.status ?? "none (network error)"}`;
    try {
      const text = await readText(r);
      if (text === null) throw new BodyError("unreadable_body", "the body broke off");
      ctx.onPhase?.("verify");
      return await verifyBody(parseBody(text, ctx.collection), held, ctx.store, ctx.collection, { expectFull, expected: entry, maintainDigest: true });
    } catch (error) {
      if (!isBodyProblem(error)) throw error;
      return (error as Error).message;
    }
  };
  const serverNotBefore = askedUntil(response, ctx.now());
  if (!response || isUnavailable(response.status) || (response.status === 404 && response.headers.has("Retry-After"))) {
    // Out of reach, overloaded, or a replica behind its primary (unknown_target): wait as asked.
    return recordFailure(ctx, `status ${response?.status ?? "none (network error)"}`, "http_" + (response?.status ?? "network"), true, serverNotBefore);
  }
  const first = await tryApply(response, held.token === null);
  if (typeof first !== "string") return commit(ctx, first, settleThrough, serverNotBefore, null);
  // §8.4 step 5: the full body of the signed token, once — from the network: a damaged or
  // forged body may sit in the browser's HTTP cache under this immutable URL (public data;
  // with a token the cache is never used).
  const fallback = await request(ctx, bodyURL(entry.token, null), await initFor(ctx, "reload"));
  const second = await tryApply(fallback, true);
  if (typeof second !== "string") return commit(ctx, second, settleThrough, askedUntil(fallback, ctx.now()), first);
  return recordFailure(ctx, `${first}; full fetch: ${second}`, "refused_body", false, askedUntil(fallback, ctx.now()));
}

async function errorCode(response: Response): Promise<string | null> {
  try {
    const parsed = JSON.parse(await response.text());
    return typeof parsed?.error === "string" ? parsed.error : null;
  } catch {
    return null;
  }
}

// MARK: - Push (§6 step 7)

/**
 * Pushes every queued write, oldest first, in batches of at most 500 writes and 512 KiB,
 * and settles each answer in one local transaction. Retrying is safe: a write keeps its
 * number, so the server applies it at most once.
 */
export async function push(ctx: SyncContext, waits: WaitPolicy = "all"): Promise<PushReport> {
  const report: PushReport = { accepted: 0, refused: [], copied: [], batches: 0, failure: null, stillQueued: 0 };
  const store = ctx.store;
  const queued = () => store.pendingWrites(false).then((w) => w.length);
  if ((await queued()) === 0) return report;
  const wait = await waitingUntil(ctx, waits, "push");
  if (wait !== null) {
    report.failure = `deferred until ${new Date(wait).toISOString()} (backoff)`;
    report.stillQueued = await queued();
    return report;
  }
  ctx.onPhase?.("push");
  const now = ctx.now();
  let serverAsked: number | null = null;
  let rotated = false;
  let limit = MAX_BATCH;
  pushing: for (;;) {
    let { clientId, lastSeq, batch } = await store.claimBatch(limit);
    if (batch.length === 0) break;
    let body = pushBody(clientId, batch);
    while (body.length > MAX_BATCH_BYTES && batch.length > 1) {
      batch = batch.slice(0, Math.ceil(batch.length / 2));
      body = pushBody(clientId, batch);
    }
    const held = (await ctx.beforePush?.(batch)) ?? null;
    if (held !== null) { report.failure = `${held}; the writes stay queued`; break; }
    const init = await initFor(ctx, "no-store", { method: "POST", headers: { "Content-Type": "application/json" }, body });
    const response = await request(ctx, ctx.collectionURL + "/mutations", init);
    if (!response) { report.failure = "no answer from the server; the writes stay queued"; break; }
    report.batches++;
    serverAsked = askedUntil(response, now);
    const text = (await readText(response)) ?? "";
    let answer: { error?: unknown; message?: unknown; client?: unknown; lastSeq?: unknown; results?: unknown } | null = null;
    try { answer = JSON.parse(text); } catch { answer = null; }
    const code = answer && typeof answer.error === "string" ? answer.error : null;
    const message = answer && typeof answer.message === "string" ? answer.message : code ?? "";
    switch (decidePushAnswer(response.status, code, batch.length)) {
      case "settle": {
        if (!answer || answer.client !== clientId || !Array.isArray(answer.results) || typeof answer.lastSeq !== "number") {
          report.failure = "the answer is unreadable; the writes stay queued";
          break pushing;
        }
        if (answer.lastSeq > lastSeq) {
          // The server processed numbers this replica never gave out (a restored backup):
          // take none of the answer and start a fresh ledger under a new client id.
          if (rotated) { report.failure = "the server reports write numbers this replica never used, even for a new client id"; break pushing; }
          rotated = true;
          await store.rotateClientId();
          continue pushing;
        }
        const results = new Map<number, { status?: string; error?: string; message?: string; copy?: string }>();
        for (const r of answer.results as { seq: number; status?: string; error?: string; message?: string; copy?: string }[]) if (!results.has(r.seq)) results.set(r.seq, r);
        const complete = await settle(store, batch, (w) => {
          const r = results.get(w.seq);
          if (!r) return null;
          if (r.status === "copied" && typeof r.copy === "string") report.copied.push([w.id, r.copy]);
          if (r.status === "refused") return { code: r.error ?? "refused", message: r.message ?? "refused by the server" };
          return "accepted";
        }, report);
        if (!complete) { report.failure = "the server answered for only some writes; the rest stay queued"; break pushing; }
        break;
      }
      case "split":
        limit = Math.max(1, Math.floor(batch.length / 2));
        break;
      case "settle-deletes": {
        await settle(store, batch.filter((w) => w.op === "delete"), () => "accepted", report);
        if (batch.some((w) => w.op !== "delete")) { report.failure = `status ${response.status}; the writes other than deletes stay queued`; break pushing; }
        break;
      }
      case "refuse-all":
        await settle(store, batch, () => ({ code: code!, message }), report);
        break;
      case "retry-later":
        report.failure = `status ${response.status}${message ? ": " + message : ""}; the writes stay queued`;
        break pushing;
    }
    if (serverAsked !== null) break;
  }
  report.stillQueued = await queued();
  await recordPushOutcome(ctx, report.failure, serverAsked, now);
  return report;
}

/** The request body of §5.5; values are already canonical JSON text. */
export function pushBody(clientId: string, batch: PendingWrite[]): string {
  const writes = batch.map((w) =>
    `{"seq":${w.seq},"op":"${w.op}","id":${JSON.stringify(w.id)}` + (w.value !== null ? `,"value":${w.value}` : "") + (w.base !== null ? `,"base":${JSON.stringify(w.base)}` : "") + "}");
  return `{"client":${JSON.stringify(clientId)},"mutations":[${writes.join(",")}]}`;
}

type Verdict = "accepted" | { code: string; message: string } | null;

/** Applies per-write verdicts in one transaction; false when some write got none. */
async function settle(store: ReplicaStore, batch: PendingWrite[], verdict: (w: PendingWrite) => Verdict, report: PushReport): Promise<boolean> {
  const accepted: number[] = [];
  const refused: number[] = [];
  let complete = true;
  for (const w of batch) {
    const v = verdict(w);
    if (v === null) complete = false;
    else if (v === "accepted" || (w.op === "delete" && v.code === "not_found")) accepted.push(w.seq);
    else {
      refused.push(w.seq);
      report.refused.push({ seq: w.seq, op: w.op, id: w.id, code: v.code, message: v.message });
    }
  }
  await store.settlePush(accepted, refused);
  report.accepted += accepted.length;
  return complete;
}

async function recordPushOutcome(ctx: SyncContext, failure: string | null, serverAsked: number | null, now: number): Promise<void> {
  if (serverAsked !== null) await ctx.store.updateState({ serverNotBefore: serverAsked });
  const queue = await ctx.store.readQueue();
  if (!queue) return;
  if (failure !== null) {
    const failures = queue.pushFailures + 1;
    const asked = serverAsked === null ? null : (serverAsked - now) / 1000;
    await ctx.store.updateQueue({
      pushFailures: failures, pushFailingSince: queue.pushFailingSince ?? now, lastPushError: failure,
      pushNotBefore: now + retryDelay(failures, asked, Math.random(), ctx.retryPolicy ?? DEFAULT_RETRY_POLICY) * 1000,
    });
  } else if (queue.pushFailures || queue.pushFailingSince || queue.pushNotBefore || queue.lastPushError) {
    await ctx.store.updateQueue({ pushFailures: 0, pushFailingSince: null, pushNotBefore: null, lastPushError: null });
  }
}
