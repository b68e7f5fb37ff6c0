// DeltaSnapReplica (src/runtime/replica.ts) and the sync engine against a real
// `deltasnap serve` on loopback, kept in memory (MemoryStorage) and, for the main path, in
// IndexedDB (the node test double of test/support/fake-indexeddb.mjs): the bundle, 304s,
// deltas, tombstones, local writes pushed and refused, the fallback ladder, backoff and the
// server's waits, signed data (the index, forged bodies and indexes), storage loss.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cli, startServer } from "./support/server.mjs";
import { installFakeBrowserStorage } from "./support/fake-indexeddb.mjs";
import { eventually, nextEvent } from "./support/browser.mjs";
import { BundleError, DeltaSnapReplica, MemoryStorage, WriteRefusedError, indexedDBStorage } from "deltasnap";
import { TrustedKey } from "deltasnap/protocol";


let server;
let bundle;
const opened = [];

before(async () => {
  server = await startServer();
  // The bundle an app ships: baked (and signed) from the store before anything changed.
  const out = mkdtempSync(join(tmpdir(), "deltasnap-bake-"));
  cli(["bake", "--db", server.db, "--collection", "countries", "--out", out, "--signing-key", join(server.dir, "keys/signing.key")]);
  bundle = { snapshot: readFileSync(join(out, "countries.snapshot")), index: readFileSync(join(out, "countries.index"), "utf8") };
  rmSync(out, { recursive: true, force: true });
});

after(async () => {
  for (const replica of opened) replica.close();
  await server?.stop();
});

/**
 * A fetch that serves the bundled files under `bundle:` URLs and passes everything else to
 * the server, through `hook(url, init, forward)` when given (a fault to inject).
 */
function fetcher(hook) {
  const files = { "bundle:countries.snapshot": bundle.snapshot, "bundle:countries.index": bundle.index, ...(fetcher.extra ?? {}) };
  const seen = [];
  const forward = (url, init) => fetch(url, init);
  const f = async (url, init = {}) => {
    seen.push({ url, init });
    if (url in files) return files[url] === null ? new Response("missing", { status: 404 }) : new Response(files[url]);
    if (url.startsWith("bundle:")) throw new TypeError(`no such file ${url}`);
    return (await hook?.(url, init, forward)) ?? forward(url, init);
  };
  f.seen = seen;
  return f;
}

/** A response with its body rewritten by `change` (status and headers kept). */
async function rewrite(response, change) {
  const headers = new Headers(response.headers);
  headers.delete("content-encoding");
  headers.delete("content-length");
  return new Response(change(await response.text()), { status: response.status, headers });
}

async function open(options) {
  const replica = await DeltaSnapReplica.open({
    serverURL: server.url, storage: new MemoryStorage(), autoSync: false, pollInterval: 0, requestTimeout: 10_000, ...options,
  });
  opened.push(replica);
  return replica;
}

const forStorage = {
  memory: () => new MemoryStorage(),
  indexeddb: () => { installFakeBrowserStorage(); return indexedDBStorage; },
};

for (const [backend, storage] of Object.entries(forStorage)) {
  test(`${backend}: first start from the bundle, a 304, a delta and a tombstone`, async () => {
    const id = `ZZ-${backend}`;
    const replica = await open({ collection: "countries", bundledSnapshot: "bundle:countries.snapshot", fetch: fetcher(), storage: storage() });
    assert.equal(replica.collection, "countries");
    assert.equal(replica.databaseName, "deltasnap:countries");
    assert.equal(replica.isSyncingTab, false, "autoSync off: no tab election");
    assert.equal((await replica.get("AD")).name, "Andorra", "offline, at once, from the bundle");
    assert.equal((await replica.all()).length, 249);
    assert.deepEqual((await replica.filter((c) => c.id.startsWith("AD"))).map((c) => c.id), ["AD"]);
    assert.equal((await replica.status()).status, "neverSynced");
    const phases = [];
    replica.addEventListener("progress", (e) => phases.push(e.detail.phase));
    let changes = 0;
    replica.addEventListener("change", () => changes++);
    // The bundle was baked before the tests changed the collection: a 304, or a delta from the bundle's token.
    const first = await replica.sync();
    assert.ok(first.pull.kind === "not-modified" || (first.pull.kind === "applied" && !first.pull.full), JSON.stringify(first));
    assert.equal(phases[0], "request");
    assert.equal((await replica.sync()).pull.kind, "not-modified");
    const status = await replica.status();
    assert.deepEqual([status.status, status.indicator, status.queued, status.count], ["synced", "green", 0, 249]);
    assert.ok(status.lastSuccessfulSync > 0);
    await server.set("countries", id, { name: "Zedland" });
    const delta = await replica.sync();
    assert.deepEqual(delta.pull, { kind: "applied", full: false, changedIds: [id], count: 250, mentionsFiles: false });
    assert.ok(phases.includes("verify") && phases.includes("commit"));
    assert.equal((await replica.get(id)).name, "Zedland");
    await server.set("countries", id, null);
    const tombstone = await replica.sync();
    assert.deepEqual(tombstone.pull, { kind: "applied", full: false, changedIds: [id], count: 249, mentionsFiles: false });
    assert.equal(await replica.get(id), undefined);
    assert.ok(changes >= 3);
    const verified = await replica.verify();
    assert.equal(verified.ok, true, JSON.stringify(verified));
  });
}

test("local writes with a token are pushed and pulled back; refused ones are rolled back and reported", async () => {
  const replica = await open({ collection: "notes", accessToken: () => server.tokens.alice });
  assert.equal((await replica.sync()).pull.kind, "applied");
  assert.equal((await replica.get("n1")).text, "first");
  await replica.put("w1", { text: "one" });
  await replica.patch("n1", { text: "patched", extra: true });
  await replica.insert("w2", { text: "two" });
  await replica.delete("w2");
  await replica.insert("w3", { text: "three" });
  await assert.rejects(replica.insert("w1", { text: "again" }), (e) => e instanceof WriteRefusedError && e.code === "exists");
  await assert.rejects(replica.put("w4", { big: 1n }), (e) => e instanceof WriteRefusedError && e.code === "invalid_record");
  assert.deepEqual((await replica.pendingWrites()).map((w) => [w.op, w.id]), [["put", "w1"], ["patch", "n1"], ["insert", "w3"]]);
  let status = await replica.status();
  assert.deepEqual([status.indicator, status.queued, status.settling], ["amber", 3, 0]);
  const result = await replica.sync();
  assert.equal(result.push.accepted, 3, JSON.stringify(result.push));
  assert.equal(result.pull.kind, "applied");
  assert.deepEqual(await replica.pendingWrites(), []);
  assert.deepEqual(await server.record("notes", "n1"), { id: "n1", text: "patched", extra: true });
  assert.equal((await server.record("notes", "w3")).text, "three");
  status = await replica.status();
  assert.deepEqual([status.status, status.indicator], ["synced", "green"]);
  // A write the server refuses: another device inserted the id first.
  await server.set("notes", "dup", { text: "server's" });
  await replica.insert("dup", { text: "mine" });
  const refused = nextEvent(replica, "refused");
  const second = await replica.sync();
  assert.deepEqual(second.push.refused.map((w) => [w.id, w.code]), [["dup", "exists"]]);
  assert.deepEqual((await refused).detail.map((w) => w.id), ["dup"]);
  assert.equal((await replica.get("dup")).text, "server's", "rolled back; the pull brought the server's");
  // pushQueued pushes without pulling (what a view does).
  await replica.put("w5", { text: "five" });
  const pushed = await replica.pushQueued();
  assert.equal(pushed.accepted, 1);
  assert.equal((await replica.status()).settling, 1, "accepted, waiting for the pull");
  const refusedAgain = nextEvent(replica, "refused");
  await server.set("notes", "dup2", { text: "server's" });
  await replica.insert("dup2", { text: "mine" });
  assert.equal((await replica.pushQueued()).refused.length, 1);
  await refusedAgain;
});

test("without a token the writes wait (401), with backoff; the operator's override tries again", async () => {
  const replica = await open({ collection: "countries" });
  await replica.sync();
  await replica.patch("AD", { capital: "Andorra la Vella (local)" });
  const first = await replica.sync();
  assert.match(first.push.failure, /^status 401: writes need the header/);
  assert.equal(first.push.stillQueued, 1);
  assert.equal(first.pull.kind, "not-modified", "the pull still runs");
  const status = await replica.status();
  assert.equal(status.pushError, first.push.failure);
  assert.equal(status.indicator, "amber");
  assert.equal((await replica.get("AD")).capital, "Andorra la Vella (local)", "the local value stays visible");
  const deferred = await replica.sync();
  assert.match(deferred.push.failure, /^deferred until/);
  const forced = await replica.sync({ waits: "none" });
  assert.match(forced.push.failure, /^status 401/);
});

test("no answer: failed and backoff; deferred until it ends; Retry-After is kept; a person's sync skips only the backoff", async () => {
  let mode = "down";
  const replica = await open({
    collection: "countries", fetch: fetcher(async (url, init, forward) => {
      if (mode === "down") throw new TypeError("connection refused");
      if (mode === "busy") return new Response("", { status: 503, headers: { "Retry-After": "120" } });
      return forward(url, init);
    }),
  });
  const failed = await replica.sync();
  assert.equal(failed.pull.kind, "failed");
  assert.deepEqual([failed.pull.code, failed.pull.unavailable], ["http_network", true]);
  assert.ok(failed.pull.retryAt > Date.now());
  let status = await replica.status();
  assert.deepEqual([status.status, status.indicator, status.lastError], ["retrying", "amber", "no answer from the server"]);
  const deferred = await replica.sync();
  assert.deepEqual(deferred.pull, { kind: "deferred", until: failed.pull.retryAt });
  mode = "busy";
  const busy = await replica.sync({ waits: "serverRequested" });
  assert.equal(busy.pull.kind, "failed");
  assert.ok(busy.pull.retryAt >= Date.now() + 119_000, "never sooner than Retry-After");
  mode = "up";
  const held = await replica.sync({ waits: "serverRequested" });
  assert.equal(held.pull.kind, "deferred", "the server's wait holds a person's sync");
  const forced = await replica.sync({ waits: "none" });
  assert.equal(forced.pull.kind, "applied");
  status = await replica.status();
  assert.equal(status.status, "synced");
});

test("failing for over an hour turns red; concurrent syncs share one run", async () => {
  const storage = new MemoryStorage();
  const replica = await open({ collection: "countries", storage, databaseName: "red", fetch: fetcher(async () => { throw new TypeError("down"); }) });
  const [a, b] = [replica.sync(), replica.sync()];
  assert.equal(await a, await b, "one run");
  const { store } = await storage.open("red");
  await store.updateState({ failingSince: Date.now() - 2 * 3600_000 });
  const status = await replica.status();
  assert.deepEqual([status.status, status.indicator], ["failing", "red"]);
  await store.updateQueue({ pushFailingSince: Date.now() - 2 * 3600_000 });
  await store.updateState({ failingSince: null, lastSuccessfulSync: Date.now() });
  assert.equal((await replica.status()).indicator, "red", "pushes failing for over an hour");
});

test("an unusable delta costs one full fetch (reset); an unusable full body keeps the data held", async () => {
  const id = "ZZ-ladder";
  let corrupt = 0;
  const replica = await open({
    collection: "countries", fetch: fetcher(async (url, init, forward) => {
      const response = await forward(url, init);
      if (corrupt > 0 && response.status === 200 && url.endsWith("/v1/collections/countries")) {
        corrupt--;
        return rewrite(response, (text) => text.replace(/"checksum":"[0-9a-f]{16}"/, '"checksum":"0000000000000000"'));
      }
      return response;
    }),
  });
  assert.equal((await replica.sync()).pull.kind, "applied");
  await server.set("countries", id, { name: "ladder" });
  corrupt = 1;
  const reset = await replica.sync();
  assert.equal(reset.pull.kind, "reset", JSON.stringify(reset.pull));
  assert.match(reset.pull.reason, /checksum/);
  assert.equal((await replica.get(id)).name, "ladder");
  await server.set("countries", id, { name: "ladder 2" });
  corrupt = 2;
  const failed = await replica.sync();
  assert.equal(failed.pull.kind, "failed");
  assert.equal(failed.pull.code, "checksum_mismatch");
  assert.match(failed.pull.reason, /; full fetch: /);
  assert.equal((await replica.get(id)).name, "ladder", "the data held is kept");
  assert.equal((await replica.verify()).ok, true);
  await server.set("countries", id, null);
});

describe("signed data (trusted keys)", () => {
  test("the bundle is checked against its signed index; the index drives the pulls", async () => {
    const replica = await open({
      collection: "countries", trustedKeys: [server.publicKey], bundledSnapshot: "bundle:countries.snapshot", bundledIndex: "bundle:countries.index", fetch: fetcher(),
    });
    assert.equal((await replica.all()).length, 249);
    const first = await replica.sync();
    assert.ok(first.pull.kind === "not-modified" || (first.pull.kind === "applied" && !first.pull.full), JSON.stringify(first.pull));
    assert.equal((await replica.sync({ waits: "none" })).pull.kind, "not-modified", "the index names the token and digest held");
    await server.set("countries", "SG-1", { name: "signed" });
    const delta = await replica.sync({ waits: "none" });
    assert.equal(delta.pull.kind, "applied", JSON.stringify(delta.pull));
    assert.equal(delta.pull.full, false);
    assert.equal((await replica.get("SG-1")).name, "signed");
    await server.set("countries", "SG-1", null);
    assert.equal((await replica.sync({ waits: "none" })).pull.kind, "applied");
    assert.equal((await replica.status()).status, "synced");
  });

  test("a forged body costs one full fetch from the network; two forged bodies keep the data", async () => {
    let forge = 0;
    const seenBodies = [];
    const replica = await open({
      collection: "countries", trustedKeys: [server.publicKey], fetch: fetcher(async (url, init, forward) => {
        const response = await forward(url, init);
        if (/\/(deltas|snapshots)\//.test(url)) {
          seenBodies.push([url.includes("/deltas/") ? "delta" : "snapshot", init.cache]);
          if (forge > 0 && response.status === 200) {
            forge--;
            return rewrite(response, (text) => text.replace(/"name":"[^"]*"/, '"name":"Forged"'));
          }
        }
        return response;
      }),
    });
    assert.equal((await replica.sync()).pull.kind, "applied", "a first full fetch");
    await server.set("countries", "SG-2", { name: "real" });
    forge = 1;
    const reset = await replica.sync({ waits: "none" });
    assert.equal(reset.pull.kind, "reset", JSON.stringify(reset.pull));
    assert.deepEqual(seenBodies.slice(-2), [["delta", "default"], ["snapshot", "reload"]]);
    assert.equal((await replica.get("SG-2")).name, "real");
    await server.set("countries", "SG-2", { name: "real 2" });
    forge = 2;
    const failed = await replica.sync({ waits: "none" });
    assert.equal(failed.pull.kind, "failed");
    assert.equal(failed.pull.code, "refused_body");
    assert.equal((await replica.get("SG-2")).name, "real");
    await server.set("countries", "SG-2", null);
  });

  test("forged, unavailable and unlisting indexes are refused; a superseded body is asked again after revalidating", async () => {
    let mode = "forge";
    const calls = [];
    const replica = await open({
      collection: "countries", trustedKeys: [server.publicKey], fetch: fetcher(async (url, init, forward) => {
        calls.push([url.replace(server.url, ""), init.cache]);
        if (url.endsWith("/v1/index")) {
          if (mode === "forge") return rewrite(await forward(url, init), (text) => text.replace(/"sequence":(\d+)/, (_, n) => `"sequence":${BigInt(n) + 1n}`));
          if (mode === "down") return new Response("", { status: 503 });
        }
        if (mode === "superseded" && /\/(deltas|snapshots)\//.test(url)) {
          mode = "normal";
          return new Response('{"error":"superseded","message":"gone"}', { status: 404 });
        }
        if (mode === "unavailable" && /\/(deltas|snapshots)\//.test(url)) return new Response("", { status: 503, headers: { "Retry-After": "1" } });
        return forward(url, init);
      }),
    });
    const forged = await replica.sync();
    assert.equal(forged.pull.kind, "failed");
    assert.match(forged.pull.reason, /^refused the index: /);
    assert.deepEqual(calls.map(([, cache]) => cache), ["default", "reload"], "a refused index is fetched once more from the network");
    mode = "down";
    const down = await replica.sync({ waits: "none" });
    assert.deepEqual([down.pull.kind, down.pull.code, down.pull.unavailable], ["failed", "index_unavailable", true]);
    mode = "superseded";
    calls.length = 0;
    const again = await replica.sync({ waits: "none" });
    assert.equal(again.pull.kind, "applied", JSON.stringify(again.pull));
    assert.deepEqual(calls.map(([, cache]) => cache), ["default", "default", "no-cache", "default"]);
    await server.set("countries", "SG-3", { name: "x" });
    mode = "unavailable";
    const unavailable = await replica.sync({ waits: "none" });
    assert.deepEqual([unavailable.pull.kind, unavailable.pull.unavailable], ["failed", true]);
    await server.set("countries", "SG-3", null);
    const missing = await open({ collection: "nothere", trustedKeys: [server.publicKey], fetch: fetcher() });
    const notListed = await missing.sync();
    assert.equal(notListed.pull.code, "not_listed");
  });

  test("a replica synced without keys recomputes its digest once; an expired index is unverifiably old", async () => {
    const storage = new MemoryStorage();
    const plain = await open({ collection: "countries", storage, databaseName: "digest" });
    assert.equal((await plain.sync()).pull.kind, "applied");
    plain.close();
    const signed = await open({ collection: "countries", storage, databaseName: "digest", trustedKeys: [server.publicKey], fetch: fetcher() });
    await server.set("countries", "SG-4", { name: "digest" });
    const delta = await signed.sync();
    assert.equal(delta.pull.kind, "applied", JSON.stringify(delta.pull));
    assert.equal((await signed.get("SG-4")).name, "digest");
    await server.set("countries", "SG-4", null);
    const { store } = await storage.open("digest");
    await store.updateState({ indexExpires: Math.floor(Date.now() / 1000) - 3600 });
    const status = await signed.status();
    assert.deepEqual([status.status, status.indicator], ["unverifiablyOld", "red"]);
  });
});

describe("the bundle", () => {
  test("an unusable bundle is reported after open; the replica stays usable", async () => {
    const cases = [
      [{ bundledSnapshot: "bundle:missing" }, /cannot load the bundled file bundle:missing: no such file/],
      [{ bundledSnapshot: "bundle:absent" }, /status 404/, { "bundle:absent": null }],
      [{ bundledSnapshot: "bundle:countries.snapshot", trustedKeys: ["KEY"] }, /needs its signed index/],
      [{ bundledSnapshot: "bundle:countries.snapshot", bundledIndex: "bundle:countries.index", trustedKeys: ["OTHER"] }, /does not verify/],
      [{ bundledSnapshot: "bundle:garbage" }, /is unusable/, { "bundle:garbage": new TextEncoder().encode("{not a body") }],
      [{ bundledSnapshot: "bundle:badgzip" }, /not valid gzip/, { "bundle:badgzip": new Uint8Array([0x1f, 0x8b, 1, 2, 3]) }],
      [{ bundledSnapshot: "bundle:latin1" }, /is not UTF-8/, { "bundle:latin1": new Uint8Array([0xff, 0xfe, 0x41]) }],
    ];
    const otherKey = `ed25519-public:${Buffer.alloc(32, 7).toString("base64")}`;
    await TrustedKey.parse(otherKey);
    for (const [options, message, extra] of cases) {
      fetcher.extra = extra;
      const keys = options.trustedKeys?.map((k) => (k === "KEY" ? server.publicKey : otherKey));
      const replica = await open({ collection: "countries", fetch: fetcher(), ...options, ...(keys ? { trustedKeys: keys } : {}) });
      fetcher.extra = undefined;
      const error = await nextEvent(replica, "error");
      assert.ok(error.detail instanceof BundleError, String(error.detail));
      assert.match(error.detail.message, message);
      assert.deepEqual(await replica.all(), []);
    }
  });

  test("a bundle whose index does not list the collection is refused", async () => {
    fetcher.extra = { "bundle:other.snapshot": bundle.snapshot };
    const replica = await open({ collection: "notes", fetch: fetcher(), bundledSnapshot: "bundle:other.snapshot", bundledIndex: "bundle:countries.index", trustedKeys: [server.publicKey] });
    fetcher.extra = undefined;
    assert.match((await nextEvent(replica, "error")).detail.message, /does not list "notes"/);
  });
});

describe("storage loss", () => {
  test("a database deleted since the last visit is rebuilt from the bundle; the lost writes are counted", async () => {
    const storage = new MemoryStorage();
    const options = { collection: "countries", storage, databaseName: "lossy", bundledSnapshot: "bundle:countries.snapshot", fetch: fetcher() };
    const first = await open(options);
    assert.equal(first.storageLoss, null);
    await first.patch("AD", { name: "lost" });
    await first.put("XX", { name: "lost too" });
    first.close();
    await storage.delete("lossy");
    const second = await open(options);
    assert.deepEqual(second.storageLoss, { lostWrites: 2 });
    const event = await nextEvent(second, "storage-lost");
    assert.deepEqual(event.detail, { lostWrites: 2 });
    assert.equal((await second.get("AD")).name, "Andorra", "rebuilt from the bundle");
    assert.equal(await second.get("XX"), undefined);
    second.close();
    const third = await open(options);
    assert.equal(third.storageLoss, null, "reported once");
  });

  test("persist asks the browser to keep the storage, when it can", async () => {
    const saved = Object.getOwnPropertyDescriptor(globalThis, "navigator");
    try {
      for (const [answer, expected] of [[true, true], [false, false], [new Error("no"), null]]) {
        Object.defineProperty(globalThis, "navigator", {
          value: { storage: { persist: async () => { if (answer instanceof Error) throw answer; return answer; } } }, configurable: true, writable: true,
        });
        const replica = await open({ collection: "countries", persist: true });
        assert.equal(replica.persisted, expected);
      }
    } finally {
      if (saved) Object.defineProperty(globalThis, "navigator", saved);
      else delete globalThis.navigator;
    }
    assert.equal((await open({ collection: "countries" })).persisted, null, "not asked");
  });
});

test("a syncing tab alone in node: syncs at once, then polls; close stops it", async () => {
  const replica = await open({ collection: "countries", autoSync: true, pollInterval: 1 });
  const leader = nextEvent(replica, "leader", 5000).catch(() => null);
  const synced = await nextEvent(replica, "sync");
  assert.equal(synced.detail.pull.kind, "applied");
  assert.equal(replica.isSyncingTab, true);
  await leader;
  await server.set("countries", "POLL-1", { name: "polled" });
  await eventually(async () => (await replica.get("POLL-1"))?.name === "polled", "the next poll to bring the change", 10_000);
  // A local write in the syncing tab is pushed within moments (here it waits: no token).
  await replica.put("POLL-2", { name: "queued" });
  const next = await nextEvent(replica, "sync");
  assert.match(next.detail.push.failure ?? "", /401|deferred/);
  replica.close();
  await server.set("countries", "POLL-1", null);
});
