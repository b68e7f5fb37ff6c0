// Measurements run inside Chromium by bench/run.py (each on a fresh IndexedDB database).
import { DeltaSnapReplica } from "./deltasnap.js";

const fresh = (name) => `bench-${name}-${Date.now()}-${Math.random().toString(36).slice(2)}`;
const open = (collection, extra = {}) => DeltaSnapReplica.open({ collection, databaseName: fresh(collection), autoSync: false, ...extra });

window.bench = {
  /** A full body of the whole collection, fetched (gzip), verified and committed in one transaction. */
  async fullApply(collection) {
    const replica = await open(collection);
    const marks = {};
    replica.addEventListener("progress", (e) => { marks[e.detail.phase] = performance.now(); });
    window.benchMarks = marks;
    const t0 = performance.now();
    const result = await replica.sync();
    const end = performance.now();
    window.benchReplica = replica;
    return {
      ms: end - t0, kind: result.pull.kind, count: (await replica.status()).count,
      // request → body received; verify → parsed and checksummed; commit → IndexedDB transaction done
      phases: { download: marks.verify - marks.request, verify: marks.commit - marks.verify, commit: end - marks.commit },
    };
  },
  /**
   * The floor beside fullApply, in the same page: the same body fetched (the browser
   * gunzips it), `JSON.parse`d, and its records written in one IndexedDB transaction with
   * no verification — the least any client must do with it. `paged`: 256 records to a row,
   * as the client stores them (Chromium spends ~50 µs a `put`); else a row per record.
   */
  async floorApply(collection, paged) {
    const t0 = performance.now();
    const response = await fetch(`/v1/collections/${collection}`, { cache: "no-store" });
    const document = JSON.parse(await response.text());
    const downloaded = performance.now();
    const db = await new Promise((resolve, reject) => {
      const request = indexedDB.open(fresh(`floor-${collection}`), 1);
      request.onupgradeneeded = () => request.result.createObjectStore("records");
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
    const written = performance.now();
    await new Promise((resolve, reject) => {
      const tx = db.transaction("records", "readwrite");
      const store = tx.objectStore("records");
      const records = document.records;
      if (paged) {
        for (let i = 0; i < records.length; i += 256) store.put(records.slice(i, i + 256), records[i].id);
      } else {
        for (const record of records) store.put(record, record.id);
      }
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
    });
    const end = performance.now();
    db.close();
    return { ms: end - t0 - (written - downloaded), count: document.records.length, phases: { download: downloaded - t0, commit: end - written } };
  },
  /** One sync that brings a 1-record delta, on the replica of fullApply (the server changed one record). */
  async deltaApply() {
    const t0 = performance.now();
    const result = await window.benchReplica.sync();
    const end = performance.now();
    // From the body received to the transaction committed: what the client itself spends.
    return { ms: end - t0, applyMs: end - window.benchMarks.verify, kind: result.pull.kind, changed: result.pull.changedIds?.length };
  },
  /**
   * The reference for files: a plain `fetch` of the same file piped into an OPFS file (the
   * least a page does to keep a download), in the same page.
   */
  async plainFileIntoOPFS(url) {
    const t0 = performance.now();
    const response = await fetch(url, { cache: "no-store" });
    const root = await navigator.storage.getDirectory();
    const handle = await root.getFileHandle(fresh("plain"), { create: true });
    await response.body.pipeTo(await handle.createWritable());
    const ms = performance.now() - t0;
    const size = (await handle.getFile()).size;
    await root.removeEntry(handle.name);
    return { ms, size };
  },
  /** A file downloaded by the client (`attachment(ref)`): fetched into OPFS, its SHA-256 checked, kept. */
  async attachmentDownload(collection, ref) {
    const replica = await open(collection, { attachments: "lazy" });
    const t0 = performance.now();
    const blob = await replica.attachment(ref);
    const ms = performance.now() - t0;
    replica.close();
    return { ms, size: blob.size };
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

