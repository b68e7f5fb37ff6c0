// A bare replica for the browser tests (no rendering: a 100,000-record list would be the
// DOM's benchmark, not the client's). Copied next to the example page by the test harness.
import { DeltaSnapReplica } from "./deltasnap.js";

const params = new URLSearchParams(location.search);
window.deltasnapLog = [];
window.phase = null;
const replica = await DeltaSnapReplica.open({
  collection: params.get("collection") ?? "countries",
  databaseName: params.get("db") ?? undefined,
  bundledSnapshot: params.get("bundle") ?? undefined,
  pollInterval: Number(params.get("poll") ?? 0),
  autoSync: params.get("sync") !== "0",
  requestTimeout: 120_000,
  accessToken: params.get("token") ?? undefined,
  attachments: params.get("attachments") ?? undefined,
});
window.progress = [];
replica.addEventListener("attachment-progress", (e) => window.progress.push(e.detail));
replica.addEventListener("progress", (e) => { window.phase = e.detail.phase; });
replica.addEventListener("sync", (e) => window.deltasnapLog.push({ type: "sync", detail: e.detail }));
window.replica = replica;
document.body.dataset.ready = "1";
