// DeltaSnapView (src/runtime/view.ts) against a real `deltasnap serve` with access rules on
// loopback, kept in a MemoryStorage: a user's partitions moving in and out, local writes
// pushed, refused views, the bookkeeping, live mode shared by two tabs.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { startServer } from "./support/server.mjs";
import { eventually, installBrowser, nextEvent, sleep } from "./support/browser.mjs";
import { DeltaSnapError, DeltaSnapView, MemoryStorage } from "deltasnap";


let server;
let browser;
const opened = [];

before(async () => {
  server = await startServer();
  browser = installBrowser();
});

after(async () => {
  for (const view of opened) view.close();
  await server?.stop();
});

async function view(options) {
  const v = await DeltaSnapView.open({ serverURL: server.url, storage: new MemoryStorage(), requestTimeout: 10_000, ...options });
  opened.push(v);
  return v;
}

const membership = (method, partition, role) =>
  server.admin(method, `/v1/collections/members/partitions/alice/records/${encodeURIComponent(partition)}`, role ? { id: partition, role } : undefined);
const partitionsOf = (report) => report.held.filter((p) => p.includes("/"));

test("a user's view: partitions in and out, local writes pushed, dropped writes reported", async () => {
  const storage = new MemoryStorage();
  const alice = await view({ accessToken: server.tokens.alice, trustedKeys: [server.publicKey], storage, databasePrefix: "v1" });
  assert.equal(alice.subject, "alice");
  assert.deepEqual(alice.partitions(), []);
  const changed = nextEvent(alice, "change");
  const first = await alice.sync();
  await changed;
  assert.equal(first.index.kind, "applied");
  assert.deepEqual(partitionsOf(first), ["attempts/alice", "members/alice", "sets/8271"]);
  assert.ok(first.held.includes("countries") && first.held.includes("notes"), "and the public collections");
  assert.deepEqual(alice.partitions(), first.held);
  assert.deepEqual((await alice.query("sets")).map((r) => r.question), ["2+2"]);
  assert.deepEqual(await alice.query("countries", (c) => c.id === "AD"), [await (await alice.replica("countries")).get("AD")]);
  assert.ok(storage.names().includes("v1:alice:sets/8271"), "one database per partition");

  const again = await alice.sync();
  assert.equal(again.index.kind, "not-modified");

  // A local write in her partition, pushed by the next sync.
  await (await alice.replica("attempts/alice")).insert("a-42", { score: 3 });
  const pushed = await alice.sync();
  assert.equal(pushed.pushes["attempts/alice"].accepted, 1);
  assert.equal((await server.record("attempts/partitions/alice", "a-42", server.tokens.alice)).score, 3);
  assert.equal(pushed.partitions["attempts/alice"].kind, "applied");

  // A new membership moves a partition in; a removed one moves it out, with its unsent writes.
  assert.equal((await membership("PUT", "sets/9000", "write")).status, 200);
  const movedIn = await alice.sync();
  assert.deepEqual(Object.keys(movedIn.partitions).sort(), ["members/alice", "sets/9000"]);
  assert.ok(partitionsOf(movedIn).includes("sets/9000"));
  await (await alice.replica("sets/8271")).put("q9", { question: "unsent" });
  assert.equal((await membership("DELETE", "sets/8271")).status, 200);
  const movedOut = await alice.sync();
  assert.deepEqual(Object.keys(movedOut.dropped), ["sets/8271"]);
  assert.deepEqual(movedOut.dropped["sets/8271"].map((w) => w.id), ["q9"]);
  assert.ok(!partitionsOf(movedOut).includes("sets/8271"));
  assert.ok(!storage.names().includes("v1:alice:sets/8271"), "its database is deleted");
  assert.equal(storage.markers.getItem("deltasnap-replica:v1:alice:sets/8271"), null, "and its marker: no storage loss");

  // Reopened later (a reload): the bookkeeping says what is held; another server is refused.
  alice.close();
  const reopened = await view({ accessToken: server.tokens.alice, trustedKeys: [server.publicKey], storage, databasePrefix: "v1" });
  assert.deepEqual(reopened.partitions(), movedOut.held);
  assert.equal((await reopened.sync()).index.kind, "not-modified");
  await assert.rejects(DeltaSnapView.open({ accessToken: server.tokens.alice, serverURL: "http://127.0.0.1:1", storage, databasePrefix: "v1" }),
    (e) => e instanceof DeltaSnapError && e.code === "other_server");
  await membership("PUT", "sets/8271", "write");
  await membership("DELETE", "sets/9000");
});

test("bob's view is his own; a token without a subject is no view", async () => {
  const bob = await view({ accessToken: server.tokens.bob });
  const report = await bob.sync();
  assert.deepEqual(partitionsOf(report), ["attempts/bob"]);
  await assert.rejects(view({ accessToken: "admin-token" }), (e) => e.code === "bad_token");
});

test("a view that cannot be read or trusted changes nothing", async () => {
  const bobsIndex = await (await fetch(`${server.url}/v1/index`, { headers: { Authorization: `Bearer ${server.tokens.bob}` } })).text();
  const publicIndex = await (await fetch(`${server.url}/v1/index`)).text();
  const broken = () => new Response(new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode("{")); c.error(new Error("reset")); } }), { status: 200 });
  const cases = [
    [() => new Response("", { status: 503 }), { reason: "view: status 503", unavailable: true }],
    [() => new Response("", { status: 401 }), { reason: "view: status 401", unavailable: false }],
    [() => { throw new TypeError("down"); }, { reason: "view request failed: no answer (network error or timeout)", unavailable: true }],
    [broken, { reason: "view request failed: the body broke off", unavailable: true }],
    [() => new Response("{", { status: 200 }), { reason: "view refused: the signed index is unreadable: not JSON: expected a member name at offset 1", unavailable: false }],
    [() => new Response(bobsIndex, { status: 200 }), { reason: 'view refused: the view is "bob"\'s, not "alice"\'s', unavailable: false }],
    [() => new Response(publicIndex, { status: 200 }), { reason: 'view refused: the view is the public index, not "alice"\'s', unavailable: false }, true],
    [() => new Response(publicIndex.replace(/"sequence":(\d+)/, '"sequence":1$1'), { status: 200 }), { unavailable: false }, true],
  ];
  for (const [answer, expected, signed] of cases) {
    const v = await view({ accessToken: server.tokens.alice, fetch: async () => answer(), ...(signed ? { trustedKeys: [server.publicKey] } : {}) });
    const report = await v.sync();
    assert.equal(report.index.kind, "failed");
    if (expected.reason) assert.equal(report.index.reason, expected.reason);
    assert.equal(report.index.unavailable, expected.unavailable, report.index.reason);
    assert.deepEqual(report.held, []);
  }
  // Unsigned, an index without a subject is taken as the caller's (an older server's view).
  const unsigned = await view({ accessToken: server.tokens.alice, fetch: async () => new Response(publicIndex, { status: 200 }) });
  assert.equal((await unsigned.sync()).index.kind, "applied");
});

test("sync with a wait: the server holds the question until the view changes; concurrent syncs share one run", async () => {
  const alice = await view({ accessToken: server.tokens.alice });
  await alice.sync();
  const [a, b] = [alice.sync({ wait: 20 }), alice.sync()];
  assert.equal(a, b, "one run");
  const started = Date.now();
  setTimeout(() => server.set("attempts/alice", "held-1", { score: 1 }).catch(() => undefined), 300);
  const report = await a;
  assert.equal(report.index.kind, "applied", JSON.stringify(report.index));
  assert.ok(Date.now() - started < 19_000, "answered when the view changed, before the wait ended");
  assert.equal((await (await alice.replica("attempts/alice")).get("held-1")).score, 1);
  await server.set("attempts/alice", "held-1", null);
});

test("live mode in two tabs: one waits on the server; a change reaches both", async () => {
  const storage = new MemoryStorage();
  browser.newDocument();
  const tabA = await view({ accessToken: server.tokens.alice, storage, databasePrefix: "live" });
  tabA.startLive({ wait: 20 });
  tabA.startLive({ wait: 20 });
  await nextEvent(tabA, "sync");
  assert.equal(tabA.isLiveTab, true);
  browser.newDocument();
  const tabB = await view({ accessToken: server.tokens.alice, storage, databasePrefix: "live" });
  tabB.startLive({ wait: 20 });
  await sleep(50);
  assert.equal(tabB.isLiveTab, false, "one tab runs the loop");
  await tabB.replica("attempts/alice");
  const bHears = nextEvent(tabB, "change", 15_000, (e) => e.detail.remote);
  const aSyncs = nextEvent(tabA, "sync", 15_000, (e) => e.detail.index.kind === "applied");
  await server.set("attempts/alice", "live-1", { score: 9 });
  await aSyncs;
  await bHears;
  assert.equal((await (await tabB.replica("attempts/alice")).get("live-1")).score, 9, "B reads what A pulled");
  // A stops: B takes over the loop and waits on the server in its turn.
  tabA.stopLive();
  assert.equal(tabA.isLiveTab, false);
  await eventually(() => tabB.isLiveTab, "tab B to take over");
  const bSyncs = nextEvent(tabB, "sync", 15_000, (e) => e.detail.index.kind === "applied");
  await sleep(200);
  await server.set("attempts/alice", "live-1", null);
  await bSyncs;
  assert.equal(await (await tabB.replica("attempts/alice")).get("live-1"), undefined);
  tabB.close();
  tabA.close();
});
