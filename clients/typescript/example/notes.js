// The notes example: notes with photos, kept in IndexedDB (records) and the Origin Private
// File System (photos) by the DeltaSnap browser client, usable offline. A photo added offline
// shows at once and uploads when the network is back — resumed after a reload, by one tab.
// A service worker (sw.js) keeps the page itself, so it opens with the network off.
// Query parameters: ?token=JWT (kept in localStorage), ?collection=NAME (default notes),
// ?db=NAME, ?poll=SECONDS.
import { DeltaSnapReplica, ReplicaQuery } from "./deltasnap.js";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const tokenField = $("token");
tokenField.value = params.get("token") ?? localStorage.getItem("deltasnap-notes-token") ?? "";
localStorage.setItem("deltasnap-notes-token", tokenField.value);
tokenField.addEventListener("change", () => localStorage.setItem("deltasnap-notes-token", tokenField.value.trim()));

// The page's own files from the service worker's cache when the network is off.
if ("serviceWorker" in navigator) navigator.serviceWorker.register("sw.js").catch((error) => console.warn("no service worker:", error));

const replica = await DeltaSnapReplica.open({
  collection: params.get("collection") ?? "notes",
  databaseName: params.get("db") ?? undefined,
  accessToken: () => tokenField.value.trim() || null,
  pollInterval: Number(params.get("poll") ?? 30),
});
window.replica = replica;

function banner(text) {
  const div = document.createElement("div");
  div.className = "banner";
  div.textContent = text;
  $("banners").append(div);
}

// The list is a live query, newest first: it re-renders when the notes change (a pull, a
// write in any tab, a rollback) and only then; the status line also follows syncs.
/** The notes the live query last gave; undefined until its first result. */
let notes;
replica.watch(new ReplicaQuery().order("createdAt", true), (records) => { notes = records; render(); });
replica.addEventListener("change", () => render());
replica.addEventListener("sync", () => render());
replica.addEventListener("refused", (e) => { for (const w of e.detail) banner(`Note ${w.id} was not saved: ${w.message}`); });
replica.addEventListener("error", (e) => banner(e.detail?.message ?? String(e.detail)));
replica.addEventListener("attachment-progress", (e) => {
  const { direction, done, size } = e.detail;
  if (direction !== "upload") return;
  $("upload").value = size ? done / size : 1;
  $("upload-text").textContent = done === size ? "uploaded" : `uploading: ${(done / 1048576).toFixed(1)} of ${(size / 1048576).toFixed(1)} MiB`;
});

/** Adds a note, with a photo when given: shown at once, uploaded before the note is pushed. */
window.addNote = async (title, photo) => {
  const note = { title, createdAt: new Date().toISOString() };
  if (photo) {
    // Once the page asks to keep data, the browser does not evict the photo under pressure.
    if (replica.persisted === null) await replica.requestPersistentStorage();
    note.photo = await replica.attach(photo);
  }
  await replica.put(`n-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`, note);
};

$("add").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await window.addNote($("title").value, $("photo").files[0] ?? null);
    $("add").reset();
  } catch (error) {
    banner(error.message);
  }
});
$("sync").addEventListener("click", () => replica.sync({ waits: "serverRequested" }));

let rendering = Promise.resolve();
function render() { rendering = rendering.then(draw, draw); }

async function draw() {
  if (notes === undefined) return;
  const [status, files] = await Promise.all([replica.status(), replica.attachmentStatuses()]);
  const states = new Map(files.map((f) => [f.sha256, f.state]));
  $("dot").dataset.indicator = status.indicator;
  $("status").textContent = `${notes.length} notes · ${status.queued ? `${status.queued} waiting to upload` : status.status}`;
  const list = $("notes");
  const items = [];
  for (const note of notes) {
    const li = document.createElement("li");
    li.dataset.id = note.id;
    if (note.photo?.$attachment) {
      const img = document.createElement("img");
      img.alt = note.title ?? "";
      // The photo from this browser's copy, or downloaded (and checked) now.
      replica.attachmentURL(note.photo).then((url) => { img.src = url; }, () => { img.alt = "photo not available offline"; });
      li.append(img);
    }
    const title = document.createElement("div");
    title.className = "title";
    title.textContent = note.title ?? note.id;
    const state = document.createElement("div");
    state.className = "state";
    const fileState = note.photo?.$attachment ? states.get(note.photo.$attachment) ?? "remote" : "no photo";
    state.dataset.state = fileState;
    state.textContent = fileState === "pending-upload" ? "photo waiting to upload" : fileState === "cached" ? "photo on this device" : fileState;
    li.append(title, state);
    items.push(li);
  }
  list.replaceChildren(...items);
  document.body.dataset.ready = "1";
}
