// Tabs and live mode in node (src/runtime/tabs.ts, replica.ts): replicas sharing one
// MemoryStorage stand for tabs sharing one IndexedDB; Web Locks are test/support/browser.mjs's
// FakeLocks; node's BroadcastChannel carries the messages between them. Against a real
// `deltasnap serve` on loopback.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { startServer } from "./support/server.mjs";
import { eventually, installBrowser, nextEvent, sleep } from "./support/browser.mjs";
import { DeltaSnapReplica, MemoryStorage } from "deltasnap";


let server;
let browser;
const opened = [];

before(async () => {
  server = await startServer();
  browser = installBrowser();
});

after(async () => {
  for (const replica of opened) replica.close();
  await server?.stop();
});

async function tab(storage, options = {}) {
  browser.newDocument();
  const document = globalThis.document;
  const replica = await DeltaSnapReplica.open({
    collection: "countries", serverURL: server.url, storage, databaseName: "tabs", pollInterval: 0,
    accessToken: server.tokens.alice, requestTimeout: 10_000, ...options,
  });
  opened.push(replica);
  return { replica, document };
}

test("one tab syncs; another forwards its syncs and writes; refusals reach every tab; freezing and closing hand over", async () => {
  const storage = new MemoryStorage();
  const a = await tab(storage);
  await eventually(() => a.replica.isSyncingTab, "tab A to take the lock");
  await nextEvent(a.replica, "sync");
  const b = await tab(storage);
  await sleep(20);
  assert.equal(b.replica.isSyncingTab, false, "the lock is A's");
  assert.equal((await b.replica.status()).isSyncingTab, false);

  // B asks for a sync: A runs it.
  const forwarded = nextEvent(a.replica, "sync");
  assert.equal(await b.replica.sync(), null);
  await forwarded;

  // B writes: A pushes it within moments; B hears of the change.
  const bHears = nextEvent(b.replica, "change", 10_000, (e) => e.detail.remote);
  const pushed = nextEvent(a.replica, "sync", 10_000, (e) => e.detail.push.accepted > 0);
  await b.replica.put("TB-1", { name: "from tab B" });
  await pushed;
  await bHears;
  assert.equal((await server.record("countries", "TB-1")).name, "from tab B");

  // A refusal is shown in every tab.
  await server.set("countries", "TB-dup", { name: "server's" });
  const refusedInB = nextEvent(b.replica, "refused");
  await b.replica.insert("TB-dup", { name: "mine" });
  assert.deepEqual((await refusedInB).detail.map((w) => w.code), ["exists"]);

  // A is frozen: it hands the lock over, B syncs from now on; A rejoins when it resumes.
  const resigned = nextEvent(a.replica, "resign");
  const bLeads = nextEvent(b.replica, "leader");
  a.document.dispatchEvent(new Event("freeze"));
  await resigned;
  await bLeads;
  assert.equal(a.replica.isSyncingTab, false);
  assert.equal(b.replica.isSyncingTab, true);
  a.document.dispatchEvent(new Event("resume"));
  assert.ok((await a.replica.get("TB-1")).name, "A reads again after resuming");

  // Back online: the syncing tab syncs at once.
  const online = nextEvent(b.replica, "sync");
  globalThis.dispatchEvent(new Event("online"));
  await online;

  // B closes: A takes over.
  const aLeads = nextEvent(a.replica, "leader");
  b.replica.close();
  await aLeads;
  assert.equal(a.replica.isSyncingTab, true);

  // Page hidden for the back/forward cache, then shown again.
  const aResigns = nextEvent(a.replica, "resign");
  globalThis.dispatchEvent(Object.assign(new Event("pagehide"), { persisted: true }));
  await aResigns;
  const aBack = nextEvent(a.replica, "leader");
  globalThis.dispatchEvent(new Event("pageshow"));
  await aBack;
  a.replica.close();
  await server.set("countries", "TB-1", null);
  await server.set("countries", "TB-dup", null);
});

test("live mode: a commit reaches the syncing tab within moments, with and without a token", async () => {
  for (const token of [server.tokens.alice, null]) {
    const storage = new MemoryStorage();
    const indexRequests = [];
    const { replica } = await tab(storage, {
      live: { wait: 20 }, accessToken: token, databaseName: `live-${token ? "token" : "public"}`,
      fetch: (url, init) => {
        if (url.includes("/v1/index?")) indexRequests.push({ url, ifNoneMatch: init.headers?.["If-None-Match"] ?? null });
        return fetch(url, init);
      },
    });
    await nextEvent(replica, "sync");
    const id = `LIVE-${token ? "T" : "P"}`;
    await eventually(() => indexRequests.length >= 2, "a held index request");
    const started = Date.now();
    const arrived = nextEvent(replica, "sync", 20_000, (e) => e.detail.pull.kind === "applied");
    await server.set("countries", id, { name: "live" });
    await arrived;
    assert.ok(Date.now() - started < 15_000, "before the wait ended");
    assert.equal((await replica.get(id)).name, "live");
    const held = indexRequests.at(-1);
    if (token) {
      assert.ok(held.ifNoneMatch, "with a token the ETag goes in If-None-Match");
      assert.doesNotMatch(held.url, /etag=/);
    } else {
      assert.match(held.url, /[?&]etag=/, "without one, in the URL");
    }
    replica.close();
    await server.set("countries", id, null);
  }
});

test("live mode: failures back off, the server's wait is kept, a 304 waits again", async () => {
  const storage = new MemoryStorage();
  const script = [
    () => new Response("not an index", { status: 200 }),
    () => new Response("", { status: 500 }),
    () => { throw new TypeError("down"); },
    () => new Response("", { status: 503 }),
    () => new Response("", { status: 429, headers: { "Retry-After": "1" } }),
    () => new Response(null, { status: 304, headers: { "DeltaSnap-Cursor": "7" } }),
  ];
  const urls = [];
  const { replica } = await tab(storage, {
    live: { wait: 1, maximumBackoff: 0.05 }, databaseName: "live-faults",
    fetch: async (url, init) => {
      if (url.includes("/v1/index?")) {
        urls.push(url);
        const next = script.shift();
        if (next) return next();
      }
      return fetch(url, init);
    },
  });
  await eventually(() => script.length === 0 && urls.length >= 7, "the scripted answers, then a real one", 15_000);
  assert.match(urls.at(-1), /cursor=7/, "the cursor of the last answer is sent back");
  replica.close();
});
