// Queries and live queries (issue 47's browser goals), run inside Chromium by bench/queries.py
// on a replica of the `big` collection (100,000 generated records), each beside its floor in
// the same page.
import { DeltaSnapReplica, ReplicaQuery } from "./deltasnap.js";

const fresh = (name) => `bench-${name}-${Date.now()}-${Math.random().toString(36).slice(2)}`;
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const request = (r) => new Promise((resolve, reject) => { r.onsuccess = () => resolve(r.result); r.onerror = () => reject(r.error); });

let replica = null;
let database = null;
let floor = null;

/** The queries measured: an indexed filter of ~20 results, and one of a few thousand. */
const QUERIES = {
  // stock is 0–9999, ~10 records a value: two values, ~20 records.
  twenty: { query: () => new ReplicaQuery().filter("stock", "<", 2).order("stock"), range: () => IDBKeyRange.upperBound(2, true), index: "stock" },
  // ~100,000 / the number of cities.
  city: { query: (city) => new ReplicaQuery().filter("city", "=", city), range: (city) => IDBKeyRange.only(city), index: "city" },
};

window.queries = {
  /** The replica, synced with the stock and city indexes declared (built in the full body's transaction). */
  async open(collection) {
    database = fresh(collection);
    const t0 = performance.now();
    replica = await DeltaSnapReplica.open({ collection, databaseName: database, autoSync: false, indexes: ["stock", "city"] });
    const result = await replica.sync();
    const ms = performance.now() - t0;
    return { ms, kind: result.pull.kind, count: (await replica.status()).count };
  },

  /** As a page load: a new replica on the database, its indexes declared, until the first indexed query answers. */
  async reload(collection) {
    replica.close();
    const t0 = performance.now();
    replica = await DeltaSnapReplica.open({ collection, databaseName: database, autoSync: false, indexes: ["stock", "city"] });
    const rows = await replica.query(QUERIES.twenty.query());
    return { ms: performance.now() - t0, rows: rows.length };
  },

  /** The floor: the same records, a row each, in a database with real IndexedDB indexes on stock and city. */
  async buildFloor(collection) {
    const records = (await replica.all());
    floor = await new Promise((resolve, reject) => {
      const r = indexedDB.open(fresh(`floor-${collection}`), 1);
      r.onupgradeneeded = () => {
        const store = r.result.createObjectStore("records", { keyPath: "id" });
        store.createIndex("stock", "stock");
        store.createIndex("city", "city");
      };
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    await new Promise((resolve, reject) => {
      const tx = floor.transaction("records", "readwrite");
      for (const record of records) tx.objectStore("records").put(record);
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
    });
    const cities = new Map();
    for (const r of records) cities.set(r.city, (cities.get(r.city) ?? 0) + 1);
    const city = [...cities].sort((a, b) => b[1] - a[1])[Math.floor(cities.size / 2)][0];
    return { records: records.length, city, cityCount: cities.get(city) };
  },

  /** `query` and the hand-written index cursor for the same filter, alternating, `runs` times each. */
  async queryVersusCursor(name, arg, runs) {
    const spec = QUERIES[name];
    const client = [];
    const cursor = [];
    let count = 0;
    let floorCount = 0;
    for (let i = 0; i < runs; i++) {
      let t0 = performance.now();
      count = (await replica.query(spec.query(arg))).length;
      client.push(performance.now() - t0);
      t0 = performance.now();
      floorCount = await new Promise((resolve, reject) => {
        const out = [];
        const tx = floor.transaction("records", "readonly");
        const c = tx.objectStore("records").index(spec.index).openCursor(spec.range(arg));
        c.onsuccess = () => { const at = c.result; if (at) { out.push(at.value); at.continue(); } else resolve(out.length); };
        c.onerror = () => reject(c.error);
      });
      cursor.push(performance.now() - t0);
    }
    return { count, floorCount, clientMs: median(client), cursorMs: median(cursor), ratio: median(client) / median(cursor) };
  },

  /**
   * A watched indexed query of ~20 results; the server changed `id` so that it enters the
   * result: the time from the apply's commit (the store's own notice, right after the
   * transaction committed) and from the start of its transaction to the watcher's call.
   */
  async watchStart() {
    window.watchCalls = [];
    window.watchStop = replica.watch(QUERIES.twenty.query(), (rows) => window.watchCalls.push({ at: performance.now(), rows: rows.length }));
    await replica.settled();
    return window.watchCalls.length;
  },
  async watchedSync() {
    const before = window.watchCalls.length;
    let committed = null;
    let commitStart = null;
    // The store tells its listeners right after the transaction committed (the replica's
    // "change" event comes later, once the sync step is over): its first call is the commit.
    const stopHearing = replica["store"].onRecordsChanged(() => { committed ??= performance.now(); });
    const onProgress = (e) => { if (e.detail.phase === "commit") commitStart = performance.now(); };
    replica.addEventListener("progress", onProgress);
    const t0 = performance.now();
    const result = await replica.sync();
    await replica.settled();
    stopHearing();
    replica.removeEventListener("progress", onProgress);
    const call = window.watchCalls[before];
    if (!call) return { called: false, kind: result.pull.kind };
    return { called: true, calls: window.watchCalls.length - before, rows: call.rows, fromCommitMs: call.at - committed, fromCommitStartMs: call.at - commitStart, fromSyncMs: call.at - t0 };
  },

  /**
   * 1,000 observers of distinct records, then `changes` local writes to records none of them
   * watches, timed until every watcher has handled them — beside the same writes with no
   * observer, alternating. The difference per change is what the observers cost.
   */
  async observers(count, changes) {
    window.watchStop?.();
    const ids = (await replica.query(new ReplicaQuery().filter("stock", ">=", 5000).order("stock").limit(count))).map((r) => r.id);
    const parts = { put: [], settle: [], read: [] };
    const write = async (i) => {
      const t0 = performance.now();
      await replica.put(`unrelated-${i % 7}`, { name: `unrelated ${i}`, stock: 50000 });
      const t1 = performance.now();
      await replica.settled();
      const t2 = performance.now();
      await replica["store"].getMany([`unrelated-${i % 7}`]);
      parts.put.push(t1 - t0); parts.settle.push(t2 - t1); parts.read.push(performance.now() - t2);
      return t2 - t0;
    };
    const without = [];
    const withObservers = [];
    for (let i = 0; i < 10; i++) await write(i);   // warm up
    for (let i = 0; i < changes; i++) without.push(await write(i));
    const t0 = performance.now();
    const stops = ids.map((id) => replica.watch(new ReplicaQuery().filter("id", "=", id), () => undefined));
    await replica.settled();
    const subscribeMs = performance.now() - t0;
    const reruns = replica.liveQueryReruns;
    const before = { put: median(parts.put), settle: median(parts.settle), read: median(parts.read) };
    parts.put = []; parts.settle = []; parts.read = [];
    for (let i = 0; i < changes; i++) withObservers.push(await write(i));
    const rerunsAfter = replica.liveQueryReruns;
    const during = { put: median(parts.put), settle: median(parts.settle), read: median(parts.read) };
    for (const stop of stops) stop();
    for (let i = 0; i < changes; i++) without.push(await write(i));
    return {
      observers: ids.length, subscribeMs, reruns: rerunsAfter - reruns, before, during,
      withoutMs: median(without), withMs: median(withObservers), perChangeMs: median(withObservers) - median(without),
    };
  },
};
document.body.dataset.ready = "1";
