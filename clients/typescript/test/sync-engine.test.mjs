// The sync engine (src/runtime/sync-engine.ts) on an in-memory store with scripted answers:
// the push answer table end to end (split, settle, refuse, deletes, rotation, partial and
// unreadable answers, backoff), timeouts, and bodies that break off. The same engine against
// a real server is in replica.test.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_RETRY_POLICY } from "deltasnap/protocol";
import { MemoryStore, fetchTextWithTimeout, fetchWithTimeout, pull, push, pushBody, waitingUntil } from "deltasnap/internal";


const json = (body, status = 200, headers = {}) => new Response(typeof body === "string" ? body : JSON.stringify(body), { status, headers });
/** An answer accepting every write of the request (optionally with per-write changes). */
const acceptAll = (request, change = () => ({})) =>
  json({ client: request.client, lastSeq: request.mutations.at(-1).seq, results: request.mutations.map((m) => ({ seq: m.seq, status: "applied", ...change(m) })) });

function context(answers, extra = {}) {
  const seen = [];
  const fetcher = async (url, init) => {
    const request = init.body ? JSON.parse(init.body) : null;
    seen.push({ url, request, init });
    const next = answers.shift();
    if (!next) throw new Error(`unexpected request ${url}`);
    return next(request, url, init);
  };
  let now = 1_000_000;
  const ctx = {
    store: new MemoryStore("engine"), collection: "notes", collectionURL: "https://data.test/v1/collections/notes", serverURL: "https://data.test",
    trustedKeys: [], accessToken: async () => "T0K", fetch: fetcher, timeoutMs: 2000, retryPolicy: DEFAULT_RETRY_POLICY,
    now: () => now, ...extra,
  };
  return { ctx, seen, advance: (ms) => (now += ms), phases: [] };
}

async function queue(store, writes) {
  for (const [op, id, value] of writes) await store.enqueue({ op, id, value: value === undefined ? null : JSON.stringify(value) }, 1);
}

test("nothing queued: no request", async () => {
  const { ctx, seen } = context([]);
  assert.deepEqual(await push(ctx), { accepted: 0, refused: [], copied: [], batches: 0, failure: null, stillQueued: 0 });
  assert.equal(seen.length, 0);
});

test("a batch too large for the server is halved until it passes; conflict copies are reported", async () => {
  const { ctx, seen } = context([
    () => json({ error: "too_large" }, 413),
    (r) => acceptAll(r, (m) => (m.id === "a" ? { status: "copied", copy: "a~copy" } : {})),
    (r) => acceptAll(r),
    (r) => acceptAll(r),
  ]);
  const phases = [];
  ctx.onPhase = (p) => phases.push(p);
  await queue(ctx.store, [["put", "a", { id: "a" }], ["put", "b", { id: "b" }], ["put", "c", { id: "c" }]]);
  const report = await push(ctx);
  assert.deepEqual(seen.map((s) => s.request.mutations.map((m) => m.seq)), [[1, 2, 3], [1], [2], [3]], "halved, and kept small for this push");
  assert.equal(report.accepted, 3);
  assert.deepEqual(report.copied, [["a", "a~copy"]]);
  assert.equal(report.batches, 4);
  assert.equal(report.failure, null);
  assert.deepEqual(phases, ["push"]);
  assert.equal(seen[0].init.headers.Authorization, "Bearer T0K");
  assert.equal(seen[0].init.cache, "no-store");
  assert.deepEqual((await ctx.store.pendingWrites()).map((w) => w.acked), [true, true, true], "accepted, waiting for the pull");
});

test("refused writes are rolled back; a refused delete of a missing record counts as done", async () => {
  const { ctx } = context([
    (r) => json({ client: r.client, lastSeq: 4, results: [
      { seq: 1, status: "refused", error: "exists", message: "a exists" }, { seq: 2, status: "refused" },
      { seq: 3, status: "refused", error: "not_found" }, { seq: 3, status: "applied" },
    ] }),
  ]);
  await queue(ctx.store, [["insert", "a", { id: "a" }], ["put", "gone", { id: "gone" }]]);
  await ctx.store.claimBatch(10);
  await queue(ctx.store, [["delete", "gone"], ["put", "c", { id: "c" }]]);
  const report = await push(ctx);
  assert.deepEqual(report.refused.map((w) => [w.seq, w.code, w.message]), [[1, "exists", "a exists"], [2, "refused", "refused by the server"]]);
  assert.equal(report.accepted, 1, "the delete: the record is gone either way (the first result for a number counts)");
  assert.equal(report.failure, "the server answered for only some writes; the rest stay queued");
  assert.equal(await ctx.store.get("a"), null, "rolled back");
  assert.deepEqual((await ctx.store.pendingWrites()).map((w) => [w.seq, w.acked]), [[3, true], [4, false]]);
});

test("a 4xx with an error code refuses the batch; a bare 4xx or 401 waits; 404 settles the deletes", async () => {
  const { ctx } = context([
    () => json({ error: "invalid_record", message: "no" }, 422),
    () => new Response("<html>proxy</html>", { status: 400 }),
    () => json({ error: "gone" }, 404),
  ]);
  await queue(ctx.store, [["put", "a", { id: "a" }]]);
  let report = await push(ctx);
  assert.deepEqual(report.refused.map((w) => [w.id, w.code, w.message]), [["a", "invalid_record", "no"]]);
  assert.equal(report.stillQueued, 0);
  await queue(ctx.store, [["put", "b", { id: "b" }], ["delete", "c"]]);
  report = await push(ctx, "none");
  assert.equal(report.failure, "status 400; the writes stay queued");
  assert.equal(report.stillQueued, 2);
  const queueState = await ctx.store.readQueue();
  assert.equal(queueState.pushFailures, 1);
  assert.equal(queueState.lastPushError, report.failure);
  assert.ok(queueState.pushNotBefore > ctx.now(), "backoff");
  // The backoff holds a push that respects it; an operator's "none" does not wait.
  const deferred = await push(ctx, "all");
  assert.match(deferred.failure, /^deferred until .* \(backoff\)$/);
  assert.equal(deferred.stillQueued, 2);
  assert.equal(await waitingUntil(ctx, "all", "push"), queueState.pushNotBefore);
  assert.equal(await waitingUntil(ctx, "serverRequested", "push"), null);
  report = await push(ctx, "none");
  assert.equal(report.accepted, 1, "the delete is done");
  assert.equal(report.failure, "status 404; the writes other than deletes stay queued");
});

test("Retry-After on an answer stops pushing and holds the pull too; a success clears the push backoff", async () => {
  const { ctx, advance } = context([
    (r) => json({ client: r.client, lastSeq: 1, results: [{ seq: 1, status: "applied" }] }, 200, { "Retry-After": "120" }),
    () => json({ error: "overloaded" }, 503),
    (r) => acceptAll(r),
  ]);
  await queue(ctx.store, [["put", "a", { id: "a" }]]);
  let report = await push(ctx);
  assert.equal(report.accepted, 1);
  const asked = (await ctx.store.readState()).serverNotBefore;
  assert.equal(asked, ctx.now() + 120_000);
  assert.equal(await waitingUntil(ctx, "serverRequested", "pull"), asked);
  advance(121_000);
  await queue(ctx.store, [["put", "b", { id: "b" }]]);
  report = await push(ctx);
  assert.equal(report.failure, "status 503: overloaded; the writes stay queued");
  advance(3_600_000 * 2);
  report = await push(ctx);
  assert.equal(report.accepted, 1);
  const q = await ctx.store.readQueue();
  assert.deepEqual([q.pushFailures, q.pushFailingSince, q.pushNotBefore, q.lastPushError], [0, null, null, null]);
});

test("an answer for numbers never given out starts a new client id, once", async () => {
  const { ctx, seen } = context([
    (r) => json({ client: r.client, lastSeq: 50, results: [] }),
    (r) => acceptAll(r),
    (r) => json({ client: r.client, lastSeq: 60, results: [] }),
    (r) => json({ client: r.client, lastSeq: 70, results: [] }),
  ]);
  await queue(ctx.store, [["put", "a", { id: "a" }]]);
  const report = await push(ctx);
  assert.equal(report.accepted, 1);
  assert.notEqual(seen[0].request.client, seen[1].request.client, "a fresh client id");
  await queue(ctx.store, [["put", "b", { id: "b" }]]);
  const again = await push(ctx, "none");
  assert.equal(again.failure, "the server reports write numbers this replica never used, even for a new client id");
});

test("unreadable answers and no answer keep the writes queued", async () => {
  const { ctx } = context([
    () => new Response("not json", { status: 200 }),
    (r) => json({ client: "someone-else", lastSeq: 1, results: [] }),
    () => { throw new TypeError("network down"); },
  ]);
  await queue(ctx.store, [["put", "a", { id: "a" }]]);
  assert.equal((await push(ctx, "none")).failure, "the answer is unreadable; the writes stay queued");
  assert.equal((await push(ctx, "none")).failure, "the answer is unreadable; the writes stay queued");
  const report = await push(ctx, "none");
  assert.equal(report.failure, "no answer from the server; the writes stay queued");
  assert.equal(report.stillQueued, 1);
});

test("a batch over 512 KiB is halved before it is sent", async () => {
  const { ctx, seen } = context([(r) => acceptAll(r), (r) => acceptAll(r), (r) => acceptAll(r)]);
  const big = "x".repeat(200 * 1024);
  await queue(ctx.store, [["put", "a", { id: "a", big }], ["put", "b", { id: "b", big }], ["put", "c", { id: "c", big }]]);
  const report = await push(ctx);
  assert.equal(report.accepted, 3);
  assert.ok(seen.every((s) => s.init.body.length <= 512 * 1024), seen.map((s) => s.init.body.length).join());
  assert.ok(seen.length >= 2);
});

test("pushBody writes the request of PROTOCOL.md §5.5", () => {
  assert.equal(pushBody("c1", [
    { seq: 1, op: "put", id: "a\"", value: '{"id":"a\\""}', base: "t.1" }, { seq: 2, op: "delete", id: "b", value: null, base: null },
  ]), '{"client":"c1","mutations":[{"seq":1,"op":"put","id":"a\\"","value":{"id":"a\\""},"base":"t.1"},{"seq":2,"op":"delete","id":"b"}]}');
});

test("a request that takes too long, or is aborted, is no answer", async () => {
  const hang = (url, init) => new Promise((_, reject) => {
    if (init.signal.aborted) reject(new Error("aborted"));
    init.signal.addEventListener("abort", () => reject(new Error("aborted")));
  });
  const started = Date.now();
  assert.equal(await fetchWithTimeout(hang, "https://x.test", {}, 30), null);
  assert.ok(Date.now() - started < 2000);
  const abort = new AbortController();
  abort.abort();
  assert.equal(await fetchWithTimeout(hang, "https://x.test", { signal: abort.signal }, 10_000), null);
  const late = new AbortController();
  const pending = fetchTextWithTimeout(hang, "https://x.test", { signal: late.signal }, 10_000);
  late.abort();
  assert.equal(await pending, null);
  const answer = await fetchTextWithTimeout(async () => new Response(null, { status: 304 }), "https://x.test", {}, 1000);
  assert.equal(answer.text, null, "no body read for a non-200");
});

test("a body that breaks off is unusable: one full fetch, then the data held is kept", async () => {
  const broken = () => new Response(new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('{"format":1')); c.error(new Error("reset")); } }), { status: 200 });
  const { ctx, seen } = context([broken, () => new Response("", { status: 503 })]);
  const phases = [];
  ctx.onPhase = (p) => phases.push(p);
  const outcome = await pull(ctx, null);
  assert.equal(outcome.kind, "failed");
  assert.match(outcome.reason, /^the body broke off .*; full fetch: status 503$/);
  assert.equal(outcome.unavailable, true);
  assert.equal(seen.length, 2);
  assert.equal(seen[1].init.headers["If-None-Match"], undefined, "the full fetch has no validators");
  assert.deepEqual(phases, ["request"]);
  const held = await ctx.store.readState();
  assert.equal(held.failures, 1);
  assert.equal(held.lastError, outcome.reason);
  // A second failure keeps the first failure's start, and counts.
  const { ctx: again } = context([() => { throw new Error("down"); }], { store: ctx.store });
  const second = await pull(again, null);
  assert.equal(second.code, "http_network");
  assert.equal((await ctx.store.readState()).failures, 2);
  assert.equal((await ctx.store.readState()).failingSince, held.failingSince);
});
