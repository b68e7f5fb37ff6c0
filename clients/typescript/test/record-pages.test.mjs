// The paged record store (src/runtime/record-pages.ts) against a Map, on a minimal in-memory
// table (string keys ordered as IndexedDB orders them).
import { test } from "node:test";
import assert from "node:assert/strict";
import { PAGE_SIZE, RecordPages } from "deltasnap/internal";


function fakeTransaction() {
  const rows = new Map();
  const sortedKeys = () => [...rows.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const tables = {
    getAllKeys: async () => sortedKeys(),
    getAll: async () => sortedKeys().map((k) => structuredClone(rows.get(k))),
    get: async (_, k) => structuredClone(rows.get(k)),
    put: (_, v, k) => { rows.set(k, structuredClone(v)); },
    delete: (_, k) => { rows.delete(k); },
    clear: () => { rows.clear(); },
  };
  return { tx: tables, rows };
}

function random(seed) {
  let x = seed;
  return () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32);
}

test("pages agree with a map through inserts, updates, deletes, splits and re-keying", async () => {
  const { tx, rows } = fakeTransaction();
  const next = random(42);
  const model = new Map();
  const initial = Array.from({ length: 1000 }, (_, i) => [`id${String(i * 2).padStart(5, "0")}`, `{"v":${i}}`]);
  RecordPages.replaceAll(tx, initial);
  initial.forEach(([k, v]) => model.set(k, v));
  for (let round = 0; round < 30; round++) {
    const pages = await RecordPages.open(tx);
    for (let i = 0; i < 200; i++) {
      // Ids below the first page's key and above the last one included.
      const id = next() < 0.05 ? `a${Math.floor(next() * 100)}` : `id${String(Math.floor(next() * 2400)).padStart(5, "0")}`;
      if (next() < 0.3) { await pages.delete(id); model.delete(id); }
      else { const body = `{"r":${round},"i":${i}}`; await pages.set(id, body); model.set(id, body); }
      assert.equal(await pages.get(id), model.get(id));
    }
    pages.flush();
    const all = await RecordPages.all(tx);
    assert.deepEqual(all, [...model.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)), `round ${round}`);
    for (const [key, page] of rows) {
      assert.equal(page.ids[0], key, "a page is stored under its first id");
      assert.ok(page.ids.length > 0 && page.ids.length <= 2 * PAGE_SIZE);
    }
  }
});

test("an empty store, then a first record, then none", async () => {
  const { tx, rows } = fakeTransaction();
  let pages = await RecordPages.open(tx);
  assert.equal(await pages.get("x"), undefined);
  await pages.delete("x");
  await pages.set("x", "{}");
  pages.flush();
  assert.deepEqual(await RecordPages.all(tx), [["x", "{}"]]);
  pages = await RecordPages.open(tx);
  await pages.delete("x");
  pages.flush();
  assert.equal(rows.size, 0);
});

test("a full body sorted by UTF-8 is stored in IndexedDB key order", async () => {
  const { tx } = fakeTransaction();
  // U+FFFF sorts before U+1F600 in UTF-8, after it in UTF-16.
  RecordPages.replaceAll(tx, [["a", "1"], ["\uffff", "2"], ["\u{1F600}", "3"]]);
  const pages = await RecordPages.open(tx);
  assert.equal(await pages.get("\uffff"), "2");
  assert.equal(await pages.get("\u{1F600}"), "3");
  assert.deepEqual((await RecordPages.all(tx)).map((r) => r[0]), ["a", "\u{1F600}", "\uffff"]);
});
