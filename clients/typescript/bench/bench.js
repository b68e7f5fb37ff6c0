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
  /** One sync that brings a 1-record delta, on the replica of fullApply (the server changed one record). */
  async deltaApply() {
    const t0 = performance.now();
    const result = await window.benchReplica.sync();
    const end = performance.now();
    // From the body received to the transaction committed: what the client itself spends.
    return { ms: end - t0, applyMs: end - window.benchMarks.verify, kind: result.pull.kind, changed: result.pull.changedIds?.length };
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

