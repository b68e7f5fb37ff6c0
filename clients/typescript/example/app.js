// The example app: the countries list, kept in IndexedDB by the DeltaSnap browser client.
// Query parameters (handy for tests and demos): ?token=JWT, ?db=NAME, ?poll=SECONDS,
// ?trusted=1 (verify signed data with ./signing.pub and ./countries.index), ?bundle=0,
// ?sync=0 (no background sync: only the "Sync now" button syncs), ?live=1 (live mode: the
// syncing tab waits on the server for changes instead of polling; ?wait=SECONDS per request).
import { DeltaSnapReplica, ReplicaQuery, WriteRefusedError } from "./deltasnap.js";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const tokenField = $("token");
tokenField.value = params.get("token") ?? sessionStorage.getItem("deltasnap-token") ?? "";
tokenField.addEventListener("change", () => sessionStorage.setItem("deltasnap-token", tokenField.value));

window.deltasnapLog = [];
const log = (type, detail) => window.deltasnapLog.push({ type, detail, at: Date.now() });

async function start() {
  const trusted = params.get("trusted") === "1";
  const trustedKeys = trusted ? [await (await fetch("signing.pub")).text()] : [];
  const replica = await DeltaSnapReplica.open({
    collection: "countries",
    databaseName: params.get("db") ?? undefined,
    bundledSnapshot: params.get("bundle") === "0" ? undefined : "countries.snapshot",
    bundledIndex: trusted ? "countries.index" : undefined,
    trustedKeys,
    accessToken: () => tokenField.value.trim() || null,
    pollInterval: Number(params.get("poll") ?? 30),
    live: params.get("live") === "1" ? { wait: Number(params.get("wait") ?? 30) } : false,
    autoSync: params.get("sync") !== "0",
    persist: true,
  });
  window.replica = replica;
  // The list is a live query: it re-renders when its records change — a pull, a write in
  // this tab or another, a rollback — and only then. Status and queue follow the events.
  window.deltasnapRenders = 0;
  replica.watch(new ReplicaQuery(), (records) => { countries = records; window.deltasnapRenders++; render(); });
  replica.addEventListener("change", (e) => { log("change", e.detail); render(); });
  replica.addEventListener("sync", (e) => { log("sync", e.detail); render(); });
  replica.addEventListener("leader", () => { log("leader"); render(); });
  replica.addEventListener("refused", (e) => {
    log("refused", e.detail);
    for (const w of e.detail) banner("error", `Your change to ${w.id} was not saved: ${w.message}`);
  });
  replica.addEventListener("storage-lost", (e) => {
    log("storage-lost", e.detail);
    banner("warn", e.detail.lostWrites
      ? `The browser deleted this site's data: ${e.detail.lostWrites} unsynced change(s) were lost. The list was rebuilt.`
      : "The browser deleted this site's data; the list was rebuilt from the bundled copy.");
  });
  replica.addEventListener("error", (e) => { log("error", String(e.detail?.message ?? e.detail)); banner("error", e.detail?.message ?? String(e.detail)); });
  if (replica.storageLoss) log("storage-lost-at-open", replica.storageLoss);

  $("search").addEventListener("input", render);
  $("sync").addEventListener("click", () => replica.sync({ waits: "serverRequested" }));
  $("list").addEventListener("click", async (e) => {
    const li = e.target.closest("li");
    if (!li) return;
    const record = await replica.get(li.dataset.id);
    $("edit-id").value = li.dataset.id;
    $("edit-name").value = record?.name ?? "";
  });
  $("edit").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const id = $("edit-id").value.trim().toUpperCase();
      const existing = await replica.get(id);
      if (existing) await replica.patch(id, { name: $("edit-name").value });
      else await replica.insert(id, { name: $("edit-name").value });
    } catch (error) {
      banner("error", error instanceof WriteRefusedError ? `Not saved: ${error.message}` : String(error));
    }
  });
  await replica.settled();
  await render();
  document.body.dataset.ready = "1";
}

function banner(kind, text) {
  const div = document.createElement("div");
  div.className = `banner ${kind}`;
  div.textContent = text;
  $("banners").append(div);
}

/** The records the live query last gave (every country, by id). */
let countries = [];
let rendering = Promise.resolve();
function render() {
  rendering = rendering.then(draw).catch((error) => console.error(error));
  return rendering;
}

async function draw() {
  const replica = window.replica;
  const records = countries;
  const [status, pending] = await Promise.all([replica.status(), replica.pendingWrites()]);
  const query = $("search").value.trim().toLowerCase();
  const pendingIds = new Set(pending.map((w) => w.id));
  const shown = query ? records.filter((r) => `${r.id} ${r.name ?? ""} ${r.officialName ?? ""}`.toLowerCase().includes(query)) : records;
  const list = $("list");
  list.replaceChildren(...shown.map((r) => {
    const li = document.createElement("li");
    li.dataset.id = r.id;
    if (pendingIds.has(r.id)) li.className = "pending";
    li.innerHTML = `<span class="flag"></span><span class="code"></span><span class="name"></span>`;
    li.querySelector(".flag").textContent = r.flag ?? "";
    li.querySelector(".code").textContent = r.id;
    li.querySelector(".name").textContent = r.name ?? "";
    return li;
  }));
  $("count").textContent = `(${shown.length} of ${records.length})`;
  const dot = $("dot");
  dot.dataset.indicator = status.indicator;
  const when = status.lastSuccessfulSync ? new Date(status.lastSuccessfulSync).toLocaleTimeString() : "never";
  $("status").textContent = `${status.status} · last sync ${when}${status.lastError ? " · " + status.lastError : ""}${status.pushError ? " · writes wait: " + status.pushError : ""}${status.isSyncingTab ? " · this tab syncs" : ""}`;
  $("queue-count").textContent = `(${pending.length})`;
  $("queue").replaceChildren(...pending.map((w) => {
    const li = document.createElement("li");
    li.className = w.acked ? "accepted" : "queued";
    li.textContent = `#${w.seq} ${w.op} ${w.id} ${w.value ?? ""}${w.acked ? " ✓ accepted" : ""}`;
    return li;
  }));
}

start().catch((error) => {
  log("fatal", String(error?.message ?? error));
  banner("error", `Cannot start: ${error?.message ?? error}`);
  document.body.dataset.ready = "error";
});
