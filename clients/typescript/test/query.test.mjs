// Queries and live queries (src/runtime/query.ts, replica.ts): the Swift client's ReplicaQuery
// semantics (operators, the order of mixed JSON types), declared indexes, and how many times a
// watcher is told: once with its first result, then once per change of its result — none for
// changes that leave it as it was, one per applied transaction, one for a local write, one for
// its rollback — across a full reset, live mode and another tab. On the in-memory store and on
// IndexedDB (the test double), then against a real `deltasnap serve`.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { installFakeBrowserStorage } from "./support/fake-indexeddb.mjs";
import { startServer } from "./support/server.mjs";
import { eventually, installBrowser } from "./support/browser.mjs";
import { DeltaSnapError, DeltaSnapReplica, MemoryStorage, ReplicaQuery, indexedDBStorage } from "deltasnap";

const rows = (records) => records.map((record) => ({ id: record.id, record }));
const ids = (selected) => selected.map((r) => r.id);

describe("ReplicaQuery", () => {
  const mixed = [
    { id: "s", v: "b" }, { id: "t", v: true }, { id: "f", v: false }, { id: "n", v: null }, { id: "m" },
    { id: "i", v: 2 }, { id: "d", v: 1.5 }, { id: "a", v: [1] }, { id: "o", v: { k: 1 } }, { id: "e", v: "é" }, { id: "z", v: "Z" },
  ];

  test("mixed types order as SQLite's json_extract: null/missing, numbers (booleans as 1 and 0), text by UTF-8 bytes (objects and arrays as their JSON)", () => {
    assert.deepEqual(ids(new ReplicaQuery().order("v").select(rows(mixed))), ["m", "n", "f", "t", "d", "i", "z", "a", "s", "o", "e"]);
    assert.deepEqual(ids(new ReplicaQuery().order("v", true).select(rows(mixed))), ["e", "o", "s", "a", "z", "i", "d", "t", "f", "m", "n"]);
  });

  test("comparisons never match a missing or null field; booleans are numbers; other types compare by rank", () => {
    const q = (c, v) => ids(new ReplicaQuery().filter("v", c, v).select(rows(mixed))).sort();
    assert.deepEqual(q("=", true), ["t"]);
    assert.deepEqual(q("=", 1), ["t"], "true is 1");
    assert.deepEqual(q("<", 2), ["d", "f", "t"]);
    assert.deepEqual(q(">=", "b"), ["e", "o", "s"]);
    assert.deepEqual(q("<", "a"), ["a", "d", "f", "i", "t", "z"], "every number is below any text");
    assert.deepEqual(q("!=", "b"), ["a", "d", "e", "f", "i", "o", "t", "z"], "!= skips null and missing too");
    assert.deepEqual(q("=", null), [], "a comparison with null matches nothing");
    assert.deepEqual(ids(new ReplicaQuery().whereNull("v").select(rows(mixed))).sort(), ["m", "n"]);
  });

  test("dotted paths, own fields only, ties by id, limit; bad fields and values are refused", () => {
    const records = [{ id: "b", owner: { email: "x" } }, { id: "a", owner: { email: "x" } }, { id: "c", owner: "x" }, { id: "d", constructor: 1 }];
    assert.deepEqual(ids(new ReplicaQuery().filter("owner.email", "=", "x").select(rows(records))), ["a", "b"]);
    assert.deepEqual(ids(new ReplicaQuery().filter("owner.email", "=", "x").limit(1).select(rows(records))), ["a"]);
    assert.deepEqual(ids(new ReplicaQuery().whereNull("constructor").select(rows(records))), ["a", "b", "c"], "an inherited property is no field");
    for (const bad of ["", "1a", "a..b", "a-b", "a.b."]) assert.throws(() => new ReplicaQuery().filter(bad, "=", 1), (e) => e instanceof DeltaSnapError && e.code === "invalid_query");
    assert.throws(() => new ReplicaQuery().filter("a", "=", { x: 1 }), (e) => e.code === "invalid_query");
    assert.throws(() => new ReplicaQuery().filter("a", "~", 1), (e) => e.code === "invalid_query");
  });
});

const backends = {
  memory: () => new MemoryStorage(),
  indexeddb: () => { installFakeBrowserStorage(); return indexedDBStorage; },
};

const mixed = [
  { id: "s", v: "b" }, { id: "t", v: true }, { id: "f", v: false }, { id: "n", v: null }, { id: "m" },
  { id: "i", v: 2 }, { id: "d", v: 1.5 }, { id: "a", v: [1] }, { id: "o", v: { k: 1 } }, { id: "e", v: "é" }, { id: "z", v: "Z" },
];
const body = (record) => JSON.stringify(record);

for (const [backend, makeStorage] of Object.entries(backends)) {
  describe(`${backend} store: declared indexes`, () => {
    // What the index gives, filtered and ordered again as the engine does, against a scan.
    const viaIndex = async (store, query, scan = { descending: false, limit: null }) => {
      const found = await store.indexedRows("v", query.filters[0] ?? null, scan);
      return ids(query.select(found.map(([id, text]) => ({ id, record: JSON.parse(text) }))));
    };
    const viaScan = async (store, query) => ids(query.select((await store.all()).map(([id, text]) => ({ id, record: JSON.parse(text) }))));

    test("an index selects what a scan selects, for every operator, as records move (deltas, a full body, local values)", async () => {
      const { store } = await makeStorage().open(`index-${backend}`);
      assert.equal(await store.indexedRows("v", null, { descending: false, limit: null }), null, "no index yet");
      await store.commitApply({ expectToken: null, replaceAll: true, upserts: mixed.map((r) => [r.id, body(r)]), deletes: [], state: { token: "t.1", count: mixed.length } }, null);
      await store.createIndex("v");
      await store.createIndex("v");
      await store.commitApply({ expectToken: "t.1", replaceAll: false, upserts: [["i", body({ id: "i", v: 7 })], ["new", body({ id: "new", v: "b" })]], deletes: ["s"], state: { token: "t.2", count: mixed.length } }, null);
      await store.enqueue({ op: "patch", id: "d", value: '{"v":"local"}' }, 1);
      await store.enqueue({ op: "delete", id: "z", value: null }, 2);
      await store.enqueue({ op: "insert", id: "l", value: '{"id":"l","v":1}' }, 3);
      const check = async (label) => {
        for (const c of ["=", "!=", "<", "<=", ">", ">="]) {
          for (const v of [1, 1.5, 7, true, "b", "é", "[1]", "local", null]) {
            const query = new ReplicaQuery().filter("v", c, v);
            assert.deepEqual(await viaIndex(store, query), await viaScan(store, query), `${label}: v ${c} ${JSON.stringify(v)}`);
          }
        }
        const isNull = new ReplicaQuery().whereNull("v");
        assert.deepEqual(await viaIndex(store, isNull), await viaScan(store, isNull), `${label}: whereNull`);
      };
      await check("after a delta and local writes");
      // A full body rebuilds it; a record many times over splits its pages, and deletes empty them.
      const many = Array.from({ length: 1200 }, (_, i) => ({ id: `r${String(i).padStart(4, "0")}`, v: i % 3 === 0 ? "b" : i % 7 }));
      await store.commitApply({ expectToken: "t.2", replaceAll: true, upserts: [...mixed, ...many].map((r) => [r.id, body(r)]), deletes: [], state: { token: "t.3", count: 0 } }, null);
      await check("after a full body");
      await store.commitApply({ expectToken: "t.3", replaceAll: false, upserts: many.slice(0, 600).map((r) => [r.id, body({ ...r, v: 1.5 })]), deletes: many.slice(600).map((r) => r.id), state: { token: "t.4", count: 0 } }, null);
      await check("after moving 600 records and deleting 600");
      // Ordered with a limit: in the index's order (or backwards), ties kept, local values beside.
      for (const descending of [false, true]) {
        const query = new ReplicaQuery().filter("v", ">=", 1).order("v", descending).limit(5);
        assert.deepEqual(await viaIndex(store, query, { descending, limit: 5 }), await viaScan(store, query), `limit, descending ${descending}`);
        const all = new ReplicaQuery().order("v", descending).limit(3);
        assert.deepEqual(await viaIndex(store, all, { descending, limit: 3 }), await viaScan(store, all), `order only, descending ${descending}`);
      }
      assert.deepEqual(await store.indexedRows("v", null, { descending: false, limit: 0 }).then((r) => r.length), 2, "limit 0: only the local values (d and l; z is deleted here)");
      await store.dropIndex("v");
      assert.equal(await store.indexedRows("v", null, { descending: false, limit: null }), null, "dropped");
      store.close();
    });
  });

  describe(`${backend} store: what each transaction reports`, () => {
    test("a local write names its id, a delta its ids and the local values, a full body anything; an accepted push nothing; a refusal its id", async () => {
      const { store } = await makeStorage().open(`changes-${backend}`);
      const heard = [];
      store.onRecordsChanged((ids) => heard.push(ids === null ? null : [...ids].sort()));
      await store.commitApply({ expectToken: null, replaceAll: true, upserts: [["a", '{"id":"a"}']], deletes: [], state: { token: "t.1", count: 1 } }, null);
      await store.enqueue({ op: "put", id: "b", value: '{"id":"b"}' }, 1);
      await store.enqueue({ op: "put", id: "c", value: '{"id":"c"}' }, 2);
      await store.commitApply({ expectToken: "t.1", replaceAll: false, upserts: [["d", '{"id":"d"}']], deletes: ["a"], state: { token: "t.2", count: 1 } }, null);
      const [b, c] = await store.claimBatch(10).then((r) => r.batch);
      await store.settlePush([b.seq], [c.seq]);
      await store.updateState({ failures: 1 });
      assert.deepEqual(heard, [null, ["b"], ["c"], ["a", "b", "c", "d"], ["c"]]);
      assert.deepEqual(await store.getMany(["a", "b", "c", "d"]), [null, '{"id":"b"}', null, '{"id":"d"}']);
      store.close();
    });
  });

  describe(`${backend} store: the values a transaction reports`, () => {
    test("each transaction hands its listeners the values the app now sees of the ids it wrote (equal to a read), reading none", async () => {
      const { store } = await makeStorage().open(`values-${backend}`);
      const heard = [];
      store.onRecordsChanged((ids, values) => heard.push({ ids, values }));
      // Every value reported equals what a read gives right after; an id not in `values` must be read.
      const check = async (label, expectedIds, unknown = []) => {
        const { ids, values } = heard.pop();
        assert.deepEqual([...ids].sort(), [...expectedIds].sort(), label);
        assert.deepEqual(ids.filter((id) => !values?.has(id)).sort(), unknown, `${label}: ids the listener must read`);
        for (const [id, value] of values ?? []) assert.equal(value, (await store.getMany([id]))[0], `${label}: ${id}`);
      };
      await store.commitApply({ expectToken: null, replaceAll: true, upserts: [["a", '{"id":"a","n":1}'], ["b", '{"id":"b","n":2}']], deletes: [], state: { token: "t.1", count: 2 } }, null);
      assert.deepEqual(heard.pop(), { ids: null, values: undefined }, "a full body: anything, no values");
      await store.enqueue({ op: "patch", id: "b", value: '{"n":3}' }, 1);
      await check("a local write", ["b"]);
      await store.enqueue({ op: "patch", id: "b", value: '{"m":1}' }, 2);
      await check("a write folded into the one before", ["b"]);
      await store.enqueue({ op: "insert", id: "c", value: '{"id":"c","n":5}' }, 3);
      await check("an insert", ["c"]);
      await store.enqueue({ op: "delete", id: "c", value: null }, 4);
      await check("a delete folded with its insert into nothing: absent again", ["c"]);
      assert.equal((await store.getMany(["c"]))[0], null);
      await store.enqueue({ op: "put", id: "e", value: '{"id":"e","n":9}' }, 5);
      await check("a put", ["e"]);
      await store.commitApply({ expectToken: "t.1", replaceAll: false, upserts: [["b", '{"id":"b","n":7}'], ["d", '{"id":"d","n":4}']], deletes: ["a"], state: { token: "t.2", count: 2 } }, null);
      await check("a delta: its records, the local value over one of them, a deletion", ["a", "b", "d", "e"]);
      assert.equal((await store.getMany(["b"]))[0], '{"id":"b","m":1,"n":3}', "the pending patches over the new server value");
      const { batch } = await store.claimBatch(10);
      await store.settlePush([batch[0].seq], [batch[1].seq]);
      await check("a refused write rolled back: the server's value again", ["e"]);
      // A pull that settles the accepted write: b's server value again, not read in the transaction.
      await store.commitApply({ expectToken: "t.2", replaceAll: false, upserts: [["d", '{"id":"d","n":5}']], deletes: [], state: { token: "t.3", count: 2 } }, batch[0].seq);
      await check("a delta that settles a write on a record it does not bring", ["b", "d"], ["b"]);
      assert.equal((await store.getMany(["b"]))[0], '{"id":"b","n":7}');
      store.close();
    });
  });

  describe(`${backend} replica: a limited, ordered query with local writes pending`, () => {
    test("equals the filter sorted over every visible record, for several limits, both orders, with and without an index", async () => {
      const records = Array.from({ length: 700 }, (_, i) => ({ id: `r${String(i).padStart(3, "0")}`, n: (i * 37) % 350, name: `x${i % 9}` }));
      const open = async (indexes) => {
        const storage = makeStorage();
        const name = `limited-${backend}-${indexes.length}`;
        const { store } = await storage.open(name);
        await store.commitApply({ expectToken: null, replaceAll: true, upserts: records.map((r) => [r.id, JSON.stringify(r)]), deletes: [], state: { token: "t.1", count: records.length } }, null);
        store.close();
        return { storage, replica: await DeltaSnapReplica.open({ collection: "limited", databaseName: name, storage, autoSync: false, serverURL: "http://127.0.0.1:9", indexes }) };
      };
      const indexed = await open(["n"]);
      const plain = await open([]);
      const byN = (n) => records.filter((r) => r.n === n).map((r) => r.id);
      for (const { replica } of [indexed, plain]) {
        await replica.patch(byN(349)[0], { n: -5 });              // from the back to the front (ascending)
        await replica.patch(byN(0)[0], { n: 400 });               // from the front to the front (descending)
        await replica.patch(byN(3)[0], { n: null });              // out of the filter (and to the front of the order alone)
        await replica.patch(byN(348)[1], { name: "moved" });      // one of the first (descending), moved nowhere
        await replica.delete(byN(2)[0]);                          // one of the first (ascending)
        await replica.delete(byN(347)[0]);                        // one of the first (descending)
        await replica.put("new-first", { n: -1, name: "new" });   // a new record at the front
        await replica.put("new-tie", { n: 5, name: "tie" });      // ties with server records
        await replica.settled();
        assert.ok((await replica.pendingWrites()).length >= 8);
      }
      const visible = (await plain.replica.all()).map((record) => ({ id: record.id, record }));
      for (const filter of [null, [">=", 2], ["<", 340], ["!=", 5]]) {
        for (const descending of [false, true]) {
          for (const limit of [0, 1, 2, 3, 5, 17, 300, 1000]) {
            const base = filter ? new ReplicaQuery().filter("n", filter[0], filter[1]) : new ReplicaQuery();
            const query = base.order("n", descending).limit(limit);
            const expected = ids(base.order("n", descending).select(visible)).slice(0, limit);
            const label = `${filter ? `n ${filter.join(" ")}` : "every record"}, descending ${descending}, limit ${limit}`;
            if (backend === "memory") indexed.storage.resetRowsRead("limited-memory-1");
            assert.deepEqual((await indexed.replica.query(query)).map((r) => r.id), expected, `${label}, indexed`);
            if (backend === "memory") assert.equal(indexed.storage.rowsRead("limited-memory-1").pages ?? 0, 0, `${label}: through the index, no record page`);
            assert.deepEqual((await plain.replica.query(query)).map((r) => r.id), expected, `${label}, no index`);
          }
        }
      }
      indexed.replica.close();
      plain.replica.close();
    });
  });

  describe(`${backend} replica: watchers`, () => {
    test("one call with the first result; one per local write that changes it; none for one that does not", async () => {
      const replica = await DeltaSnapReplica.open({ collection: "todos", storage: makeStorage(), autoSync: false, serverURL: "http://127.0.0.1:9", indexes: ["done"] });
      await replica.put("t1", { done: false, due: 2 });
      await replica.put("t2", { done: true, due: 1 });
      const calls = [];
      const stop = replica.watch(new ReplicaQuery().filter("done", "=", false).order("due"), (todos) => calls.push(todos.map((t) => t.id)));
      await replica.settled();
      assert.deepEqual(calls, [["t1"]]);
      const reruns = replica.liveQueryReruns;
      await replica.put("t3", { done: true, due: 0 });          // outside the filter before and after
      await replica.settled();
      assert.deepEqual(calls, [["t1"]]);
      assert.equal(replica.liveQueryReruns, reruns, "an unrelated write runs nothing again");
      await replica.put("t4", { done: false, due: 1 });
      await replica.settled();
      assert.deepEqual(calls, [["t1"], ["t4", "t1"]]);
      await replica.patch("t4", { note: "same place" });          // in the result: the records changed
      await replica.patch("t2", { done: false });                 // enters it
      await replica.settled();
      assert.deepEqual(calls.slice(2), [["t4", "t1"], ["t2", "t4", "t1"]]);
      assert.deepEqual(await replica.query(new ReplicaQuery().filter("done", "=", true)), [{ id: "t3", done: true, due: 0 }]);
      stop();
      await replica.put("t5", { done: false, due: 9 });
      await replica.settled();
      assert.equal(calls.length, 4, "an unsubscribed watcher hears nothing");
      replica.close();
    });

    test("subscribe/getSnapshot keep one array until the result changes (useSyncExternalStore's contract)", async () => {
      const replica = await DeltaSnapReplica.open({ collection: "todos", storage: makeStorage(), autoSync: false, serverURL: "http://127.0.0.1:9" });
      const live = replica.liveQuery(new ReplicaQuery().whereNull("done"));
      const { subscribe, getSnapshot } = live;                      // React calls them unbound
      assert.equal(getSnapshot(), undefined);
      let told = 0;
      const unsubscribe = subscribe(() => told++);
      await replica.settled();
      const first = getSnapshot();
      assert.deepEqual([told, first], [1, []]);
      await replica.put("x", { done: true });
      await replica.settled();
      assert.equal(getSnapshot(), first, "same array: nothing re-renders");
      await replica.put("y", { title: "open" });
      await replica.settled();
      assert.deepEqual([told, getSnapshot()], [2, [{ id: "y", title: "open" }]]);
      unsubscribe();
      replica.close();
    });
  });
}

describe("a page load", () => {
  test("finds its declared indexes in the database: an indexed query reads its range, no record page", async () => {
    const storage = new MemoryStorage();
    const records = Array.from({ length: 5000 }, (_, i) => ({ id: `c${String(i).padStart(5, "0")}`, region: `r${i % 100}`, n: i }));
    {
      const { store } = await storage.open("load");
      await store.commitApply({ expectToken: null, replaceAll: true, upserts: records.map((r) => [r.id, JSON.stringify(r)]), deletes: [], state: { token: "t.1", count: records.length } }, null);
      store.close();
    }
    const first = await DeltaSnapReplica.open({ collection: "load", databaseName: "load", storage, autoSync: false, serverURL: "http://127.0.0.1:9", indexes: ["region"] });
    assert.equal((await first.query(new ReplicaQuery().filter("region", "=", "r7"))).length, 50);
    first.close();
    storage.resetRowsRead("load");
    // The next page load: the index is there.
    const again = await DeltaSnapReplica.open({ collection: "load", databaseName: "load", storage, autoSync: false, serverURL: "http://127.0.0.1:9", indexes: ["region"] });
    const found = await again.query(new ReplicaQuery().filter("region", "=", "r42").order("n"));
    assert.deepEqual(found.map((r) => r.n), Array.from({ length: 50 }, (_, i) => 42 + 100 * i));
    const read = storage.rowsRead("load");
    assert.equal(read.pages ?? 0, 0, `no record page read: ${JSON.stringify(read)}`);
    assert.ok((read.indexes ?? 0) <= 3, `the directory and the page(s) of the range: ${JSON.stringify(read)}`);
    // Observers of single records (id = …) are decided by the changed ids: no read, no re-run.
    const calls = new Map();
    const stops = found.slice(0, 40).map((r) => again.watch(new ReplicaQuery().filter("id", "=", r.id), (rows) => calls.set(r.id, (calls.get(r.id) ?? 0) + 1)));
    await again.settled();
    const reruns = again.liveQueryReruns;
    storage.resetRowsRead("load");
    await again.put("elsewhere", { region: "none" });
    await again.settled();
    assert.equal(again.liveQueryReruns, reruns, "an unrelated write: no observer runs again");
    assert.equal(storage.rowsRead("load").pages ?? 0, 1, "only the write's own read of its page");
    await again.patch(found[3].id, { seen: true });
    await again.settled();
    assert.deepEqual([again.liveQueryReruns - reruns, calls.get(found[3].id), calls.get(found[4].id)], [1, 2, 1], "the observer of that record: one call");
    for (const stop of stops) stop();
    // Ordered with a limit: the index's first page only.
    storage.resetRowsRead("load");
    again.createIndex("n");
    assert.deepEqual((await again.query(new ReplicaQuery().order("n", true).limit(3))).map((r) => r.n), [4999, 4998, 4997]);
    assert.equal(storage.rowsRead("load").pages, 5000 / 256 + 1 | 0, "building the index on n read every record, once");
    storage.resetRowsRead("load");
    assert.deepEqual((await again.query(new ReplicaQuery().filter("n", "<", 2).order("n").limit(1))).map((r) => r.n), [0]);
    assert.equal(storage.rowsRead("load").pages ?? 0, 0);
    await again.dropIndex("n");
    assert.equal((await again.query(new ReplicaQuery().filter("n", "<", 2))).length, 2, "a dropped index: a scan");
    again.close();
  });
});

describe("an apply's watchers", () => {
  test("decide and re-run from the values the apply's transaction wrote: no record page read beyond the apply's own", async () => {
    const storage = new MemoryStorage();
    const records = Array.from({ length: 3000 }, (_, i) => ({ id: `r${String(i).padStart(4, "0")}`, stock: i % 500 }));
    {
      const { store } = await storage.open("applied");
      await store.commitApply({ expectToken: null, replaceAll: true, upserts: records.map((r) => [r.id, JSON.stringify(r)]), deletes: [], state: { token: "t.0", count: records.length } }, null);
      store.close();
    }
    const replica = await DeltaSnapReplica.open({ collection: "applied", databaseName: "applied", storage, autoSync: false, serverURL: "http://127.0.0.1:9", indexes: ["stock"] });
    const store = replica["store"];
    let token = 0;
    // A delta moving `id` to `stock`, and the rows (by table) the whole of it read: the apply, then whatever the watchers did.
    const move = async (id, stock) => {
      await replica.settled();
      storage.resetRowsRead("applied");
      await store.commitApply({ expectToken: `t.${token}`, replaceAll: false, upserts: [[id, JSON.stringify({ id, stock })]], deletes: [], state: { token: `t.${++token}`, count: records.length } }, null);
      await replica.settled();
      return storage.rowsRead("applied");
    };
    const unwatched = await move("r1234", 0);
    const calls = [];
    const stop = replica.watch(new ReplicaQuery().filter("stock", "<", 2).order("stock"), (rows) => calls.push(rows.map((r) => r.id)));
    await replica.settled();
    const reruns = replica.liveQueryReruns;
    const watched = await move("r2345", 0);
    assert.equal(calls.length, 2, "the first result, then the record entering it");
    assert.ok(calls[1].includes("r2345"));
    assert.equal(watched.pages, unwatched.pages, `the watcher read no record page: ${JSON.stringify({ watched, unwatched })}`);
    assert.equal(replica.liveQueryReruns - reruns, 1);
    const unrelated = await move("r2346", 300);
    assert.equal(unrelated.pages, unwatched.pages, "a change outside the query: no page read either");
    assert.equal(unrelated.indexes, unwatched.indexes, "nor a re-run");
    assert.equal(replica.liveQueryReruns - reruns, 1);
    // The local value wins over the delta's: the watcher is told from it, and leaves the record out.
    await replica.patch("r2347", { stock: 400 });
    await replica.settled();
    await move("r2347", 1);
    assert.equal(calls.length, 2, "a delta under a pending write that keeps the record out of the query: no call");
    stop();
    replica.close();
  });
});

describe("subscribing", () => {
  test("observers of records by id subscribed together read their first results together: each record page once", async () => {
    const storage = new MemoryStorage();
    const records = Array.from({ length: 2000 }, (_, i) => ({ id: `r${String(i).padStart(4, "0")}`, n: i }));
    {
      const { store } = await storage.open("subscribe");
      await store.commitApply({ expectToken: null, replaceAll: true, upserts: records.map((r) => [r.id, JSON.stringify(r)]), deletes: [], state: { token: "t.1", count: records.length } }, null);
      store.close();
    }
    const replica = await DeltaSnapReplica.open({ collection: "subscribe", databaseName: "subscribe", storage, autoSync: false, serverURL: "http://127.0.0.1:9" });
    await replica.put("r0003", { n: -3 });                                   // a local value is what the observer sees
    await replica.settled();
    storage.resetRowsRead("subscribe");
    const wanted = [...Array.from({ length: 200 }, (_, i) => `r${String(i).padStart(4, "0")}`), "missing"];
    const first = new Map();
    const stops = wanted.map((id) => replica.watch(new ReplicaQuery().filter("id", "=", id), (rows) => first.set(id, [...(first.get(id) ?? []), rows])));
    const dropped = replica.watch(new ReplicaQuery().filter("id", "=", "r0500"), () => assert.fail("unsubscribed before its first result"));
    dropped();
    const other = [];
    const stopOther = replica.watch(new ReplicaQuery().filter("n", "<", 2), (rows) => other.push(rows.map((r) => r.id)));
    await replica.settled();
    assert.equal(first.size, wanted.length);
    for (const id of wanted) {
      const expected = id === "missing" ? [] : [id === "r0003" ? { id, n: -3 } : { id, n: Number(id.slice(1)) }];
      assert.deepEqual(first.get(id), [expected], id);
    }
    assert.deepEqual(other, [["r0000", "r0001", "r0003"]], "another kind of query: its own first result (r0003 by its local value)");
    // The ids' one record page once (not once per observer), then every page once for the query without an index.
    assert.equal(storage.rowsRead("subscribe").pages, 1 + Math.ceil(records.length / 256), JSON.stringify(storage.rowsRead("subscribe")));
    await replica.patch("r0007", { seen: true });
    await replica.settled();
    assert.deepEqual(first.get("r0007").at(-1), [{ id: "r0007", n: 7, seen: true }], "and they follow their record from then on");
    assert.equal(first.get("r0008").length, 1);
    for (const stop of [...stops, stopOther]) stop();
    replica.close();
  });
});

describe("against deltasnap serve", () => {
  let server;
  let browser;
  const opened = [];
  before(async () => { server = await startServer(); browser = installBrowser(); });
  after(async () => { for (const r of opened) r.close(); await server?.stop(); });
  const open = async (options) => {
    const replica = await DeltaSnapReplica.open({ serverURL: server.url, storage: new MemoryStorage(), autoSync: false, requestTimeout: 10_000, ...options });
    opened.push(replica);
    return replica;
  };

  test("one call per applied transaction that changes the result, none for unrelated ones; a write and its rollback one each; a full reset keeps it working", async () => {
    let corrupt = false;
    const replica = await open({
      collection: "notes", accessToken: () => server.tokens.alice, indexes: ["topic"],
      fetch: async (url, init) => {
        const response = await fetch(url, init);
        if (!corrupt || response.status !== 200 || !String(url).endsWith("/v1/collections/notes")) return response;
        corrupt = false;
        const text = (await response.text()).replace(/"checksum":"[0-9a-f]{16}"/, '"checksum":"0000000000000000"');
        return new Response(text, { status: 200, headers: response.headers });
      },
    });
    await replica.sync();
    const calls = [];
    replica.watch(new ReplicaQuery().filter("topic", "=", "watched").order("id"), (notes) => calls.push(notes.map((n) => `${n.id}:${n.text}`)));
    await replica.settled();
    assert.deepEqual(calls, [[]]);
    const reruns = replica.liveQueryReruns;
    await server.set("notes", "other", { topic: "elsewhere", text: "x" });
    assert.equal((await replica.sync()).pull.kind, "applied");
    await replica.settled();
    assert.deepEqual(calls.length, 1, "an unrelated delta: no call");
    assert.equal(replica.liveQueryReruns, reruns, "and no query ran again");
    await server.set("notes", "w1", { topic: "watched", text: "one" });
    await server.set("notes", "w2", { topic: "watched", text: "two" });
    await replica.sync();
    await replica.settled();
    assert.deepEqual(calls.slice(1), [["w1:one", "w2:two"]], "two records, one transaction: one call");
    // A local write, then the server refuses it: one call for each.
    await server.set("notes", "dup", { topic: "elsewhere", text: "server's" });
    await replica.insert("dup", { topic: "watched", text: "mine" });   // the replica has not pulled dup yet
    await replica.settled();
    assert.deepEqual(calls.slice(2), [["dup:mine", "w1:one", "w2:two"]]);
    const result = await replica.sync();
    assert.deepEqual(result.push.refused.map((w) => w.id), ["dup"]);
    await replica.settled();
    assert.deepEqual(calls.slice(3), [["w1:one", "w2:two"]], "the rollback: one call");
    // A full reset (a corrupted delta costs one full fetch): the watcher hears the change, once.
    await server.set("notes", "w1", { topic: "watched", text: "one again" });
    corrupt = true;
    assert.equal((await replica.sync()).pull.kind, "reset");
    await replica.settled();
    assert.deepEqual(calls.slice(4), [["w1:one again", "w2:two"]]);
    await server.set("notes", "w2", null);
    await replica.sync();
    await replica.settled();
    assert.deepEqual(calls.slice(5), [["w1:one again"]], "still watching after the reset");
    assert.equal(calls.length, 6);
  });

  test("live mode brings a commit to the watcher; another tab's write reaches this tab's watcher, once", async () => {
    const storage = new MemoryStorage();
    browser.newDocument();
    const a = await open({ collection: "countries", storage, databaseName: "watch-tabs", autoSync: true, live: { wait: 5 }, pollInterval: 0, accessToken: server.tokens.alice });
    await eventually(() => a.isSyncingTab, "tab A to sync");
    await eventually(async () => (await a.status()).token !== null, "tab A's first pull");
    browser.newDocument();
    const b = await open({ collection: "countries", storage, databaseName: "watch-tabs", autoSync: true, pollInterval: 0, accessToken: server.tokens.alice });
    const seen = [];
    b.watch(new ReplicaQuery().filter("region", "=", "Atlantis"), (records) => seen.push(records.map((r) => r.name)));
    await eventually(() => seen.length === 1, "the first result");
    assert.deepEqual(seen, [[]]);
    await server.set("countries", "ZA-live", { name: "Live", region: "Atlantis" });
    await eventually(() => seen.length === 2, "the live pull in tab A to reach tab B's watcher");
    assert.deepEqual(seen[1], ["Live"]);
    await a.patch("ZA-live", { name: "Live 2" });
    await eventually(() => seen.length === 3, "tab A's local write to reach tab B's watcher");
    assert.deepEqual(seen[2], ["Live 2"]);
    await a.settled();
    await b.settled();
    await new Promise((resolve) => setTimeout(resolve, 300));   // the push and its pull: the value stays "Live 2"
    assert.equal(seen.length, 3, "a write's push and pull change nothing more");
    await server.set("countries", "ZA-live", null);
  });
});
