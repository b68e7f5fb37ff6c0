// Measurements run inside Chromium by bench/run.py (each on a fresh IndexedDB database).
import { DeltaSnapReplica } from "./deltasnap.js";

const fresh = (name) => `bench-${name}-${Date.now()}-${Math.random().toString(36).slice(2)}`;
const open = (collection, extra = {}) => DeltaSnapReplica.open({ collection, databaseName: fresh(collection), autoSync: false, ...extra });

window.bench = {
  /** A full body of the whole collection, fetched (gzip), verified and committed in one transaction. */
  async fullApply(collection) {
    const replica = await open(collection);
    const t0 = performance.now();
    const result = await replica.sync();
    const ms = performance.now() - t0;
    window.benchReplica = replica;
    return { ms, kind: result.pull.kind, count: (await replica.status()).count };
  },
  /** One sync that brings a 1-record delta, on the replica of fullApply (the server changed one record). */
  async deltaApply() {
    const t0 = performance.now();
    const result = await window.benchReplica.sync();
    return { ms: performance.now() - t0, kind: result.pull.kind, changed: result.pull.changedIds?.length };
  },
  /** First start from a bundled snapshot, until the first query answers. */
  async firstStart(collection, bundle, id) {
    const t0 = performance.now();
    const replica = await open(collection, { bundledSnapshot: bundle });
    const record = await replica.get(id);
    const ms = performance.now() - t0;
    return { ms, found: record !== undefined, count: (await replica.status()).count };
  },
};
document.body.dataset.ready = "1";

import { parseBody, StateChecksum } from "./deltasnap.js";
/** Where a full apply's time goes (for tuning; not part of the report). */
window.bench.phases = async (collection) => {
  const t = [performance.now()];
  const response = await fetch(`/v1/collections/${collection}`, { cache: "no-store" });
  const text = await response.text();
  t.push(performance.now());
  const body = parseBody(text, collection);
  t.push(performance.now());
  const sum = new StateChecksum();
  for (const r of body.records) sum.add(r.canonical);
  t.push(performance.now());
  const db = await new Promise((resolve, reject) => { const r = indexedDB.open(fresh("raw"), 1); r.onupgradeneeded = () => r.result.createObjectStore("records"); r.onsuccess = () => resolve(r.result); r.onerror = reject; });
  await new Promise((resolve, reject) => {
    const tx = db.transaction(["records"], "readwrite", { durability: "strict" });
    const store = tx.objectStore("records");
    for (const r of body.records) store.put(r.canonical, r.id);
    tx.oncomplete = resolve; tx.onerror = reject;
  });
  t.push(performance.now());
  return { fetch: t[1] - t[0], parse: t[2] - t[1], checksum: t[3] - t[2], idbPut: t[4] - t[3] };
};
