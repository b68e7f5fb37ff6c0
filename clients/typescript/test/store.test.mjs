// The store contract (src/runtime/store.ts), run on both stores: the in-memory one and the
// IndexedDB one (over test/support/fake-indexeddb.mjs, an in-memory IndexedDB for node).
// Then what only the IndexedDB store does: open, blocked, commit failures, versionchange.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { installFakeBrowserStorage } from "./support/fake-indexeddb.mjs";
import { MemoryStorage, StorageError, WriteRefusedError, indexedDBStorage } from "deltasnap";
import { EMPTY_STATE, IndexedDBStore, MemoryStore, StateMovedError } from "deltasnap/internal";


const backends = {
  memory: () => new MemoryStorage(),
  indexeddb: () => { installFakeBrowserStorage(); return indexedDBStorage; },
};

const full = (records, token = "t.1") => ({
  expectToken: null, replaceAll: true, upserts: records, deletes: [], state: { token, count: records.length },
});

for (const [backend, makeStorage] of Object.entries(backends)) {
  describe(`${backend} store`, () => {
    test("opens, creating once; the state starts empty", async () => {
      const storage = makeStorage();
      const first = await storage.open("db1");
      assert.equal(first.created, true);
      assert.equal(first.store.name, "db1");
      assert.deepEqual(await first.store.readState(), EMPTY_STATE);
      assert.equal(await first.store.readQueue(), null);
      await first.store.updateState({ failures: 2 });
      first.store.close();
      const again = await storage.open("db1");
      assert.equal(again.created, false);
      assert.equal((await again.store.readState()).failures, 2);
      again.store.close();
      await storage.delete("db1");
      const fresh = await storage.open("db1");
      assert.equal(fresh.created, true, "a deleted database is created anew");
      fresh.store.close();
    });

    test("a full body, then a delta; reads see the overlay over the server state", async () => {
      const { store } = await makeStorage().open("db2");
      await store.commitApply(full([["a", '{"id":"a","v":1}'], ["c", '{"id":"c","v":3}'], ["b", '{"id":"b","v":2}']]), null);
      assert.deepEqual((await store.all()).map(([id]) => id), ["a", "b", "c"]);
      assert.equal(await store.get("b"), '{"id":"b","v":2}');
      assert.equal(await store.get("z"), null);
      await assert.rejects(store.commitApply(full([]), null), StateMovedError, "the state moved: nothing written");
      assert.equal((await store.allServerRecords()).length, 3);
      await store.commitApply({ expectToken: "t.1", replaceAll: false, upserts: [["d", '{"id":"d"}']], deletes: ["a"], state: { token: "t.2", count: 3 } }, null);
      assert.deepEqual((await store.allServerRecords()).map(([id]) => id), ["b", "c", "d"]);
      assert.deepEqual([...(await store.serverRecords(["a", "b"])).keys()], ["b"]);
      // Local writes: visible at once, over the server's values.
      await store.enqueue({ op: "patch", id: "b", value: '{"v":20}' }, 1000);
      await store.enqueue({ op: "delete", id: "c", value: null }, 1001);
      await store.enqueue({ op: "insert", id: "e", value: '{"id":"e"}' }, 1002);
      await store.enqueue({ op: "insert", id: "0", value: '{"id":"0"}' }, 1003);
      assert.deepEqual(await store.all(), [["0", '{"id":"0"}'], ["b", '{"id":"b","v":20}'], ["d", '{"id":"d"}'], ["e", '{"id":"e"}']]);
      assert.equal(await store.get("c"), null, "a local delete hides the server's record");
      assert.equal((await store.serverRecords(["c"])).get("c"), '{"id":"c","v":3}', "the server's value stays");
      store.close();
    });

    test("the queue: numbers, folding, claiming, settling, rolling back", async () => {
      const { store } = await makeStorage().open("db3");
      await store.commitApply(full([["a", '{"id":"a","n":1}']]), null);
      await assert.rejects(store.enqueue({ op: "insert", id: "a", value: '{"id":"a"}' }, 1), WriteRefusedError);
      assert.equal((await store.pendingWrites()).length, 0, "a refused write is never queued");
      const w1 = await store.enqueue({ op: "patch", id: "a", value: '{"n":2}' }, 1);
      const w2 = await store.enqueue({ op: "patch", id: "a", value: '{"m":3}' }, 2);
      assert.equal(w1.seq, 1);
      assert.equal(w2.seq, 1, "an unsent write on the same id is folded");
      assert.deepEqual(JSON.parse(await store.get("a")), { id: "a", n: 2, m: 3 });
      assert.equal(w1.base, "t.1", "the write's base is the token held");
      // An insert then a delete of a record the server lacks fold into nothing.
      await store.enqueue({ op: "insert", id: "x", value: '{"id":"x"}' }, 3);
      await store.enqueue({ op: "delete", id: "x", value: null }, 4);
      assert.deepEqual((await store.pendingWrites()).map((w) => w.id), ["a"]);
      assert.equal(await store.get("x"), null);
      const claimed = await store.claimBatch(10);
      assert.deepEqual(claimed.batch.map((w) => w.seq), [1]);
      assert.equal(claimed.lastSeq, 2);
      assert.equal((await store.readQueue()).sentThrough, 1);
      // Sent: the next write on the id is a write of its own.
      const w3 = await store.enqueue({ op: "patch", id: "a", value: '{"k":1}' }, 5);
      assert.equal(w3.seq, 3);
      await store.enqueue({ op: "put", id: "y", value: '{"id":"y"}' }, 6);
      assert.deepEqual((await store.claimBatch(1)).batch.map((w) => w.seq), [1], "the oldest first, up to the limit");
      // Accepted writes stay visible until a pull brings them; refused ones are rolled back.
      await store.settlePush([1], [3, 99]);
      const pending = await store.pendingWrites();
      assert.deepEqual(pending.map((w) => [w.seq, w.acked]), [[1, true], [4, false]]);
      assert.deepEqual((await store.pendingWrites(false)).map((w) => w.seq), [4]);
      assert.deepEqual(JSON.parse(await store.get("a")), { id: "a", n: 2, m: 3 }, "write 3 rolled back");
      // The pull that brings write 1 settles it in its own transaction.
      await store.commitApply({ expectToken: "t.1", replaceAll: false, upserts: [["a", '{"id":"a","m":3,"n":2}']], deletes: [], state: { token: "t.2" } }, 1);
      assert.deepEqual((await store.pendingWrites()).map((w) => w.seq), [4]);
      assert.equal(await store.get("a"), '{"id":"a","m":3,"n":2}');
      assert.equal(await store.get("y"), '{"id":"y"}');
      await store.settlePush([4], []);
      await store.updateState({ lastError: null }, 4);
      assert.deepEqual(await store.pendingWrites(), [], "a 304 settles too");
      const before = (await store.readQueue()).clientId;
      const after = await store.rotateClientId();
      assert.match(after, /^[0-9a-f-]{36}$/);
      assert.notEqual(after, before);
      assert.equal((await store.updateQueue({ pushFailures: 2 })).pushFailures, 2);
      store.close();
    });

    test("a transaction that throws leaves nothing behind", async () => {
      const { store } = await makeStorage().open("db4");
      await assert.rejects(store.transaction("readwrite", async (t) => {
        t.put("meta", { ...EMPTY_STATE, token: "half" }, "state");
        t.put("overlay", { body: null }, "q");
        t.clear("pages");
        await t.get("meta", "state");
        throw new Error("the body failed");
      }), /the body failed/);
      assert.equal((await store.readState()).token, null);
      assert.equal(await store.get("q"), null);
      // `add` of a key that exists aborts the transaction.
      await store.transaction("readwrite", async (t) => t.add("pending", { seq: 1 }, 1));
      await assert.rejects(store.transaction("readwrite", async (t) => {
        t.put("meta", { ...EMPTY_STATE, token: "half" }, "state");
        t.add("pending", { seq: 1 }, 1);
        await t.getAll("pending");
      }));
      assert.equal((await store.readState()).token, null);
      await assert.rejects(store.transaction("readonly", async (t) => t.put("meta", {}, "x")), (e) => /read-only|ReadOnly/i.test(`${e.name} ${e.message}`));
      store.close();
    });

    test("suspend aborts the open transaction and holds new ones until resume", async () => {
      const { store } = await makeStorage().open("db5");
      const open = store.transaction("readwrite", async (t) => {
        t.put("meta", { ...EMPTY_STATE, token: "frozen" }, "state");
        await t.get("meta", "state");
        await t.get("meta", "queue");
        return "done";
      });
      store.suspend();
      await assert.rejects(open);
      let read = false;
      const waiting = store.readState().then((s) => { read = true; return s; });
      await new Promise((r) => setTimeout(r, 20));
      assert.equal(read, false, "no transaction while frozen");
      store.resume();
      assert.equal((await waiting).token, null, "the aborted write left nothing");
      store.close();
      await assert.rejects(store.readState(), (e) => e instanceof StorageError || /closing|closed/.test(e.message));
    });
  });
}

describe("memory storage", () => {
  test("markers outlive a deleted database; a store of its own works alone", async () => {
    const storage = new MemoryStorage();
    storage.markers.setItem("k", 1);
    assert.equal(storage.markers.getItem("k"), "1");
    const { store } = await storage.open("gone");
    assert.deepEqual(storage.names(), ["gone"]);
    await storage.delete("gone");
    await storage.delete("never-was");
    await assert.rejects(store.readState(), /deleted/);
    assert.equal(storage.markers.getItem("k"), "1");
    storage.markers.removeItem("k");
    assert.equal(storage.markers.getItem("k"), null);
    const alone = new MemoryStore();
    assert.equal(alone.name, "memory");
    await alone.updateState({ count: 3 });
    assert.equal((await alone.readState()).count, 3);
  });

  test("two stores on one database see each other's commits, one transaction at a time", async () => {
    const storage = new MemoryStorage();
    const a = (await storage.open("shared")).store;
    const b = (await storage.open("shared")).store;
    const order = [];
    await Promise.all([
      a.transaction("readwrite", async (t) => { order.push("a1"); await new Promise((r) => setTimeout(r, 10)); t.put("meta", { ...EMPTY_STATE, count: 1 }, "state"); order.push("a2"); }),
      b.transaction("readwrite", async (t) => { order.push("b1"); t.put("meta", { ...EMPTY_STATE, count: 2 }, "state"); order.push("b2"); }),
    ]);
    assert.deepEqual(order, ["a1", "a2", "b1", "b2"]);
    assert.equal((await a.readState()).count, 2);
  });
});

describe("IndexedDB store", () => {
  test("without IndexedDB it says so; an open that fails or is blocked is a StorageError", async () => {
    const saved = Object.getOwnPropertyDescriptor(globalThis, "indexedDB");
    delete globalThis.indexedDB;
    await assert.rejects(IndexedDBStore.open("x"), (e) => e instanceof StorageError && /not available/.test(e.message));
    await indexedDBStorage.delete("x");
    if (saved) Object.defineProperty(globalThis, "indexedDB", saved);
    const { indexedDB } = installFakeBrowserStorage();
    indexedDB.failNextOpen = new DOMException("no space", "UnknownError");
    await assert.rejects(IndexedDBStore.open("x"), (e) => e instanceof StorageError && /cannot open IndexedDB database "x": no space/.test(e.message));
    indexedDB.blockNextOpen = true;
    await assert.rejects(IndexedDBStore.open("x"), (e) => e instanceof StorageError && /blocked by another tab/.test(e.message));
  });

  test("a commit that fails (the quota) is a StorageError and changes nothing", async () => {
    const { indexedDB } = installFakeBrowserStorage();
    const { store } = await IndexedDBStore.open("quota");
    indexedDB.failNextCommit = new DOMException("quota exceeded", "QuotaExceededError");
    await assert.rejects(store.updateState({ count: 5 }), (e) => e instanceof StorageError && /could not commit: quota exceeded/.test(e.message));
    assert.equal((await store.readState()).count, 0);
    store.close();
    await assert.rejects(store.readState(), (e) => e instanceof StorageError && /refused a transaction/.test(e.message));
  });

  test("a body that awaits something else finds its transaction finished, as in a browser", async () => {
    installFakeBrowserStorage();
    const { store } = await IndexedDBStore.open("inactive");
    await assert.rejects(store.transaction("readwrite", async (t) => {
      await new Promise((r) => setTimeout(r, 5));
      t.put("meta", {}, "state");
    }), /TransactionInactive|finished/);
    store.close();
  });

  test("deleting the database closes this connection (versionchange); markers are localStorage", async () => {
    const { indexedDB, localStorage } = installFakeBrowserStorage();
    const { store } = await indexedDBStorage.open("evicted");
    assert.deepEqual(indexedDB.names(), ["evicted"]);
    await indexedDBStorage.delete("evicted");
    assert.deepEqual(indexedDB.names(), []);
    await assert.rejects(store.readState(), StorageError, "the connection was closed");
    indexedDBStorage.markers.setItem("m", "1");
    assert.equal(localStorage.getItem("m"), "1");
  });
});
