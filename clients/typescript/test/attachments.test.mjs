// Attachments in the browser client (src/runtime/attachments.ts, attachment-files.ts,
// src/protocol/attachment.ts, sha256.ts) against a real `deltasnap serve` on loopback:
// references, the streamed SHA-256, attach → upload (resumable) → push, eager / lazy / none,
// verified downloads resumed with Range, a flipped byte refused, another user's file not
// readable, the cache limit and release, a full quota, and the IndexedDB-blob backend.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { startServer } from "./support/server.mjs";
import { installFakeBrowserStorage } from "./support/fake-indexeddb.mjs";
import { installFakeOPFS, removeFakeOPFS } from "./support/fake-opfs.mjs";
import { AttachmentFiles, DeltaSnapReplica, DeltaSnapView, MemoryStorage, WriteRefusedError, attachmentReportLine, indexedDBStorage } from "deltasnap";
import { SHA256Stream, isMediaType, parseReference, referenceJSON, referencesIn, sha256OfBlob } from "deltasnap/protocol";


let server;
const opened = [];
before(async () => { server = await startServer({ signed: false }); });
after(async () => {
  for (const replica of opened) replica.close();
  await server?.stop();
});

const hex = (bytes) => createHash("sha256").update(bytes).digest("hex");
/** Bytes that differ from run to run and file to file. */
function bytesOf(size, seed) {
  const out = new Uint8Array(size);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < size; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; out[i] = x & 255; }
  return out;
}

/** A fetch that records each request (method, URL, Range, body bytes) and lets `hook` change it. */
function recorder(hook) {
  const seen = [];
  const f = async (url, init = {}) => {
    const body = init.body instanceof Blob ? init.body.size : 0;
    seen.push({ url: String(url), method: init.method ?? "GET", range: init.headers?.Range ?? null, body });
    return (await hook?.(String(url), init, seen)) ?? fetch(url, init);
  };
  f.seen = seen;
  f.files = () => seen.filter((r) => r.url.includes("/attachments/") && r.method === "GET");
  return f;
}

async function open(options) {
  const replica = await DeltaSnapReplica.open({ serverURL: server.url, storage: new MemoryStorage(), autoSync: false, pollInterval: 0, requestTimeout: 10_000, ...options });
  opened.push(replica);
  return replica;
}

test("references: top-level members and array elements, nothing deeper; malformed ones are refused", () => {
  const sha = "a".repeat(64);
  const ref = { $attachment: sha, size: 4, type: "image/jpeg" };
  const found = referencesIn(JSON.stringify({ id: "n1", photo: ref, gallery: [ref, { $attachment: "b".repeat(64), size: 0, type: "text/plain; charset=utf-8" }, 3], deep: { photo: ref } }));
  assert.deepEqual(found.map((r) => r.sha256), [sha, "b".repeat(64)], "each file once");
  assert.deepEqual(referencesIn('{"id":"x","text":"no files"}'), []);
  assert.deepEqual(referenceJSON(found[0]), ref);
  assert.equal(parseReference({ other: 1 }), null);
  for (const bad of [{ $attachment: sha.toUpperCase(), size: 1, type: "a/b" }, { $attachment: sha, size: -1, type: "a/b" }, { $attachment: sha, size: 1.5, type: "a/b" },
    { $attachment: sha, size: 1, type: "nonsense" }, { $attachment: sha, size: 1, type: "a/b", extra: 1 }, { $attachment: sha, size: 1 }]) {
    assert.throws(() => parseReference(bad), /invalid|not an attachment/, JSON.stringify(bad));
  }
  assert.ok(isMediaType("text/plain; charset=utf-8") && !isMediaType("text") && !isMediaType("a/" + "b".repeat(300)));
});

test("SHA-256: the streamed hash agrees with node's at every boundary, and with WebCrypto for a blob", async () => {
  for (const size of [0, 1, 55, 56, 63, 64, 65, 127, 128, 1000, 70_001]) {
    const data = bytesOf(size, size + 1);
    const split = new SHA256Stream().update(data.subarray(0, size >> 1)).update(data.subarray(size >> 1)).hex();
    assert.equal(split, hex(data), `size ${size}`);
  }
  const blob = new Blob([bytesOf(3 << 20, 9)]);
  const expected = hex(new Uint8Array(await blob.arrayBuffer()));
  assert.equal(await sha256OfBlob(blob), expected);
  assert.equal(await sha256OfBlob(blob, 0), expected, "streamed in pieces");
});

test("attach offline → upload → push: the record lands once, pointing at the right bytes; another replica downloads it eagerly", async () => {
  const data = bytesOf(300_000, 1);
  const writer = await open({ collection: "notes", accessToken: server.tokens.alice });
  const photo = await writer.attach(new Blob([data], { type: "image/png" }));
  assert.deepEqual(photo, { $attachment: hex(data), size: data.length, type: "image/png" });
  assert.deepEqual((await writer.attachmentStatuses()).map((s) => s.state), ["pending-upload"]);
  // Shown at once, offline.
  assert.deepEqual(new Uint8Array(await (await writer.attachment(photo)).arrayBuffer()), data);
  await writer.put("p1", { title: "Beach", photo });
  const result = await writer.sync();
  assert.equal(result.push.accepted, 1, JSON.stringify(result));
  assert.equal(result.attachments.uploaded, 1);
  assert.equal(result.attachments.uploadedBytes, data.length);
  assert.match(attachmentReportLine(result.attachments), /^attachments: uploaded 1 \(300000 bytes\), downloaded 0/);
  assert.deepEqual((await server.record("notes", "p1")).photo, photo);
  const served = await fetch(`${server.url}/v1/collections/notes/attachments/${photo.$attachment}`);
  assert.equal(served.status, 200);
  assert.equal(hex(new Uint8Array(await served.arrayBuffer())), photo.$attachment);
  assert.deepEqual((await writer.attachmentStatuses()).map((s) => s.state), ["cached"]);

  const f = recorder();
  const reader = await open({ collection: "notes", fetch: f });
  const pulled = await reader.sync();
  assert.equal(pulled.attachments.downloaded, 1, JSON.stringify(pulled.attachments));
  assert.equal(f.files().length, 1);
  assert.deepEqual((await reader.attachmentStatuses()).find((s) => s.sha256 === photo.$attachment).state, "cached");
  assert.equal(hex(new Uint8Array(await (await reader.attachment(photo)).arrayBuffer())), photo.$attachment);
  assert.equal(f.files().length, 1, "read from the replica's own copy");
  await reader.sync();
  assert.equal(f.files().length, 1, "a sync with nothing new downloads nothing");
});

test("lazy: a sync downloads no file; the first use downloads exactly that file, once; none downloads nothing", async () => {
  const refs = [];
  for (let i = 0; i < 3; i++) {
    const data = bytesOf(10_000 + i, 100 + i);
    const put = await fetch(`${server.url}/v1/collections/notes/attachments/${hex(data)}`, { method: "PUT", body: data, headers: { Authorization: `Bearer ${server.tokens.alice}`, "Content-Type": "image/jpeg" } });
    assert.equal(put.status, 201);
    refs.push(await put.json());
    await server.set("notes", `lazy${i}`, { id: `lazy${i}`, photo: refs[i] });
  }
  const f = recorder();
  const lazy = await open({ collection: "notes", fetch: f, attachments: "lazy" });
  await lazy.sync();
  assert.equal(f.files().length, 0);
  const note = await lazy.get("lazy1");
  const url = await lazy.attachmentURL(note.photo);
  assert.match(url, /^blob:/);
  assert.equal(await lazy.attachmentURL(note.photo), url);
  assert.equal(hex(new Uint8Array(await (await lazy.attachment(note.photo)).arrayBuffer())), refs[1].$attachment);
  assert.deepEqual(f.files().map((r) => r.url.split("/").pop()), [refs[1].$attachment]);
  const states = Object.fromEntries((await lazy.attachmentStatuses()).map((s) => [s.sha256, s.state]));
  assert.equal(states[refs[0].$attachment], "remote");
  assert.equal(states[refs[1].$attachment], "cached");

  const g = recorder();
  const none = await open({ collection: "notes", fetch: g, attachments: "none" });
  await none.sync();
  assert.equal(g.files().length, 0);
  none.setAttachmentPolicy("eager");
  const later = await none.sync({ waits: "none" });
  assert.ok(later.attachments.downloaded >= 3, JSON.stringify(later.attachments));
});

test("a flipped byte is refused and fetched again; bytes that stay wrong are never kept", async () => {
  const data = bytesOf(50_000, 7);
  const put = await fetch(`${server.url}/v1/collections/notes/attachments/${hex(data)}`, { method: "PUT", body: data, headers: { Authorization: `Bearer ${server.tokens.alice}` } });
  const ref = await put.json();
  await server.set("notes", "flip", { id: "flip", photo: ref });   // a file is readable once a record refers to it
  let flips = 1;
  const flip = async (url, init) => {
    if (!url.includes("/attachments/") || flips-- <= 0) return null;
    const bytes = new Uint8Array(await (await fetch(url, init)).arrayBuffer());
    bytes[1000] ^= 0x40;
    return new Response(bytes, { status: 200 });
  };
  const f = recorder(flip);
  const replica = await open({ collection: "notes", fetch: f, attachments: "lazy" });
  assert.equal(hex(new Uint8Array(await (await replica.attachment(ref)).arrayBuffer())), ref.$attachment);
  assert.equal(f.files().length, 2, "refused once, fetched again");

  flips = 100;
  const g = recorder(flip);
  const other = await open({ collection: "notes", fetch: g, attachments: "lazy" });
  await assert.rejects(other.attachment(ref), (e) => e.code === "attachment_mismatch");
  await other.sync();
  assert.equal((await other.attachmentStatuses()).find((s) => s.sha256 === ref.$attachment).state, "remote");
});

test("a download cut short resumes with Range and sends only the rest", async () => {
  const data = bytesOf(3_000_000, 11);
  const put = await fetch(`${server.url}/v1/collections/notes/attachments/${hex(data)}`, { method: "PUT", body: data, headers: { Authorization: `Bearer ${server.tokens.alice}` } });
  const ref = await put.json();
  await server.set("notes", "cut", { id: "cut", file: ref });
  let cut = true;
  const f = recorder(async (url, init) => {
    if (!url.includes("/attachments/") || !cut) return null;
    cut = false;
    const response = await fetch(url, init);
    const reader = response.body.getReader();
    let sent = 0;
    // The body breaks off after about a million bytes.
    const body = new ReadableStream({
      async pull(controller) {
        if (sent >= 1_000_000) return controller.error(new TypeError("network connection lost"));
        const { done, value } = await reader.read();
        if (done) return controller.close();
        sent += value.length;
        controller.enqueue(value);
      },
    });
    return new Response(body, { status: 200, headers: response.headers });
  });
  const replica = await open({ collection: "notes", fetch: f, attachments: "lazy" });
  await assert.rejects(replica.attachment(ref), (e) => e.code === "attachment_failed" && /resumes there/.test(e.message));
  const blob = await replica.attachment(ref);
  assert.equal(hex(new Uint8Array(await blob.arrayBuffer())), ref.$attachment);
  const [, second] = f.files();
  assert.match(second.range, /^bytes=\d+-$/);
  assert.ok(Number(second.range.slice(6, -1)) >= 1_000_000, second.range);
});

test("an upload cut mid-way resumes at the server's offset, also from a replica opened again (a reload)", async () => {
  const storage = new MemoryStorage();
  const data = bytesOf(20 << 20, 13);
  let cutAfter = 1;   // PATCHes that get through before the network goes
  const patches = [];
  const hook = async (url, init) => {
    if (init.method !== "PATCH") return null;
    if (cutAfter-- <= 0) throw new TypeError("network connection lost");
    patches.push(init.body.size);
    return null;
  };
  const first = await open({ collection: "notes", storage, accessToken: server.tokens.alice, fetch: recorder(hook) });
  const ref = await first.attach(new Blob([data]), "application/octet-stream");
  await first.put("big", { title: "Big", file: ref });
  const cutShort = await first.sync();
  assert.equal(cutShort.push.accepted, 0);
  assert.match(cutShort.push.failure, /not uploaded/);
  assert.equal((await first.pendingWrites(false)).length, 1, "the write waits for its file");
  first.close();

  cutAfter = 100;
  const second = await open({ collection: "notes", storage, accessToken: server.tokens.alice, fetch: recorder(hook) });
  const done = await second.sync({ waits: "none" });
  assert.equal(done.push.accepted, 1, JSON.stringify(done));
  const sent = patches.reduce((a, b) => a + b, 0);
  // The first part arrived; the cut ones never left: everything sent is the file and at most one part again.
  assert.ok(sent <= data.length + (8 << 20) + 1, `sent ${sent} for ${data.length}`);
  assert.equal(done.attachments.uploadedBytes, data.length - (8 << 20), "the second replica sent only the rest");
  assert.deepEqual((await server.record("notes", "big")).file, ref);
});

test("a write referring to a file the replica neither holds nor reads is refused missing_attachment before queueing; so is a malformed reference", async () => {
  const replica = await open({ collection: "notes", accessToken: server.tokens.alice });
  await assert.rejects(
    replica.put("ghost", { photo: { $attachment: "c".repeat(64), size: 3, type: "image/png" } }),
    (e) => e instanceof WriteRefusedError && e.code === "missing_attachment");
  assert.equal(await replica.get("ghost"), undefined);
  assert.equal((await replica.pendingWrites()).length, 0);
  await assert.rejects(replica.put("bad", { photo: { $attachment: "nope", size: 1, type: "a/b" } }), (e) => e instanceof WriteRefusedError && e.code === "invalid_attachment");
  await assert.rejects(replica.attach(new Blob(["x"]), "not a type"), (e) => e.code === "invalid_attachment");
});

test("another user's partition file is not readable: the server's 404, and nothing kept", async () => {
  const view = await DeltaSnapView.open({ accessToken: server.tokens.alice, serverURL: server.url, storage: new MemoryStorage() });
  await view.sync();
  const mine = await view.replica("attempts/alice");
  const ref = await mine.attach(new Blob([bytesOf(5000, 21)]), "image/png");
  await mine.put("a2", { score: 4, photo: ref });
  const report = await view.sync();
  assert.equal(report.pushes["attempts/alice"].accepted, 1, JSON.stringify(report.pushes));
  const bobs = await open({ collection: "attempts/alice", accessToken: server.tokens.bob });
  await assert.rejects(bobs.attachment(ref), (e) => e.code === "attachment_unavailable");
  // Bob knows the hash, not the bytes: his replica refuses to name it in his own partition (§12.2).
  const bobsOwn = await open({ collection: "attempts/bob", accessToken: server.tokens.bob });
  await assert.rejects(bobsOwn.put("b9", { photo: ref }), (e) => e instanceof WriteRefusedError && e.code === "missing_attachment");
  const alices = await open({ collection: "attempts/alice", accessToken: server.tokens.alice });
  await alices.sync();
  assert.equal(hex(new Uint8Array(await (await alices.attachment(ref)).arrayBuffer())), ref.$attachment);
  view.close();
});

test("release: a file no record refers to goes; the cache limit evicts the least recently used; pending files stay", async () => {
  const replica = await open({ collection: "notes", accessToken: server.tokens.alice });
  const keep = await replica.attach(new Blob([bytesOf(4000, 31)]), "image/png");
  const pendingOnly = await replica.attach(new Blob([bytesOf(4000, 32)]), "image/png");
  await replica.put("r1", { photo: keep });
  await replica.sync();
  assert.equal((await replica.attachmentStatuses()).find((s) => s.sha256 === keep.$attachment).state, "cached");
  await replica.setAttachmentCacheLimit(0);
  const states = Object.fromEntries((await replica.attachmentStatuses()).map((s) => [s.sha256, s.state]));
  assert.equal(states[keep.$attachment], "remote", "evicted over the limit");
  assert.equal(states[pendingOnly.$attachment], "pending-upload", "never evicted before upload");
  await replica.setAttachmentCacheLimit(null);
  await replica.attachment(keep);
  await replica.delete("r1");
  await replica.sync();
  assert.equal((await replica.attachmentStatuses()).find((s) => s.sha256 === keep.$attachment), undefined, "no record refers to it: gone");
});

test("the budget postpones what does not fit; a later sync with room fetches it", async () => {
  const data = bytesOf(200_000, 41);
  const put = await fetch(`${server.url}/v1/collections/notes/attachments/${hex(data)}`, { method: "PUT", body: data, headers: { Authorization: `Bearer ${server.tokens.alice}` } });
  await server.set("notes", "budget", { id: "budget", photo: await put.json() });
  const replica = await open({ collection: "notes", attachmentBudget: 1000 });
  const first = await replica.sync();
  assert.ok(first.attachments.postponed >= 1, JSON.stringify(first.attachments));
  assert.ok(await replica.get("budget"), "the records are there");
  replica.setAttachmentBudget(null);
  const second = await replica.sync({ waits: "none" });
  assert.equal(second.attachments.postponed, 0);
  assert.ok(second.attachments.downloaded >= 1);
});

test("a full storage quota: attach throws quota_exceeded, records and queue untouched; a download reports it", async () => {
  const quota = () => { throw new DOMException("quota", "QuotaExceededError"); };
  const entries = new Map();
  const ledger = { get: async (k) => entries.get(k), all: async () => [...entries.values()], put: async (e) => { entries.set(e.sha256, e); }, remove: async (k) => { entries.delete(k); }, destroy: async () => entries.clear() };
  const bytes = { kind: "memory", read: async () => null, size: async () => 0, writer: async () => ({ write: quota, stream: new WritableStream({ write: quota }), close: async () => undefined }), move: async () => undefined, remove: async () => undefined, destroy: async () => undefined };
  const storage = new MemoryStorage();
  storage.openFiles = async () => new AttachmentFiles(ledger, bytes);
  const replica = await open({ collection: "notes", storage, accessToken: server.tokens.alice });
  await replica.sync();
  const before = (await replica.all()).length;
  await assert.rejects(replica.attach(new Blob(["photo"]), "image/png"), (e) => e.code === "quota_exceeded");
  assert.equal((await replica.all()).length, before);
  assert.equal((await replica.pendingWrites()).length, 0);
  const errors = [];
  replica.addEventListener("error", (e) => errors.push(e.detail));
  replica.setAttachmentPolicy("eager");
  const result = await replica.sync({ waits: "none" });
  assert.ok(result.attachments.failures.some((f) => /quota/.test(f)), JSON.stringify(result.attachments));
  assert.equal(errors[0]?.code, "quota_exceeded");
  assert.equal((await replica.all()).length, before, "the records stand");
});

test("IndexedDB blobs (no OPFS): attach, upload, download and release round-trip", async () => {
  installFakeBrowserStorage();
  const name = `files-idb-${Date.now()}`;
  const writer = await open({ collection: "notes", storage: indexedDBStorage, databaseName: name, accessToken: server.tokens.alice });
  const data = bytesOf(100_000, 51);
  const ref = await writer.attach(new Blob([data]), "image/png");
  await writer.put("idb1", { photo: ref });
  assert.equal((await writer.sync()).push.accepted, 1);
  const reader = await open({ collection: "notes", storage: indexedDBStorage, databaseName: name + "-r" });
  const result = await reader.sync();
  assert.ok(result.attachments.downloaded >= 1, JSON.stringify(result.attachments));
  assert.equal(hex(new Uint8Array(await (await reader.attachment(ref)).arrayBuffer())), ref.$attachment);
  reader.close();
  await indexedDBStorage.delete(name + "-r");
});

test("OPFS: the bytes in the replica's own folder, the entries in IndexedDB; a cut download kept for Range; a dropped partition's folder goes", async () => {
  installFakeBrowserStorage();
  const root = installFakeOPFS();
  try {
    const name = `files-opfs-${Date.now()}`;
    const writer = await open({ collection: "notes", storage: indexedDBStorage, databaseName: name, accessToken: server.tokens.alice });
    const data = bytesOf(2_500_000, 61);
    const ref = await writer.attach(new Blob([data]), "image/png");
    const folder = (await root.getDirectoryHandle("deltasnap-files")).entries.get(encodeURIComponent(name));
    assert.ok(folder.entries.has(ref.$attachment), "the pending file is in OPFS");
    await writer.put("opfs1", { photo: ref });
    assert.equal((await writer.sync()).push.accepted, 1);
    let cut = true;
    const f = recorder(async (url, init) => {
      if (!url.includes("/attachments/") || !cut) return null;
      cut = false;
      const response = await fetch(url, init);
      const reader = response.body.getReader();
      const first = await reader.read();
      let pulls = 0;
      return new Response(new ReadableStream({ pull(c) { if (pulls++ === 0) c.enqueue(first.value); else c.error(new TypeError("cut")); } }), { status: 200, headers: response.headers });
    });
    const reader = await open({ collection: "notes", storage: indexedDBStorage, databaseName: name + "-r", fetch: f, attachments: "lazy" });
    await reader.sync();
    await assert.rejects(reader.attachment(ref), (e) => e.code === "attachment_failed");
    const readerFolder = (await root.getDirectoryHandle("deltasnap-files")).entries.get(encodeURIComponent(name + "-r"));
    assert.ok(readerFolder.entries.get(ref.$attachment + ".partial").bytes.length > 0, "what arrived is kept");
    assert.equal(hex(new Uint8Array(await (await reader.attachment(ref)).arrayBuffer())), ref.$attachment);
    assert.match(f.files()[1].range, /^bytes=[1-9]\d*-$/);
    assert.ok(readerFolder.entries.has(ref.$attachment) && !readerFolder.entries.has(ref.$attachment + ".partial"));
    reader.close();
    await indexedDBStorage.delete(name + "-r");
    assert.ok(!(await root.getDirectoryHandle("deltasnap-files")).entries.has(encodeURIComponent(name + "-r")), "deleting the replica deletes its files");
  } finally {
    removeFakeOPFS();
  }
});

test("bundled files (bake --attachments): taken from the app's files, checked, without a server download; a damaged one is fetched from the server", async () => {
  const good = bytesOf(40_000, 71);
  const other = bytesOf(40_000, 72);
  const refs = [];
  for (const [i, data] of [good, other].entries()) {
    const put = await fetch(`${server.url}/v1/collections/notes/attachments/${hex(data)}`, { method: "PUT", body: data, headers: { Authorization: `Bearer ${server.tokens.alice}` } });
    refs.push(await put.json());
    await server.set("notes", `bundled${i}`, { id: `bundled${i}`, photo: refs[i] });
  }
  // The app bundles the first file as it is and a damaged copy of the second.
  const damaged = other.slice();
  damaged[5] ^= 1;
  const f = recorder(async (url) => {
    if (!url.startsWith("bundle:")) return null;
    const name = url.split("/").pop();
    if (name === refs[0].$attachment) return new Response(good);
    if (name === refs[1].$attachment) return new Response(damaged);
    return new Response("missing", { status: 404 });
  });
  const replica = await open({ collection: "notes", fetch: f, attachments: "lazy", bundledAttachments: "bundle:attachments/" });
  assert.equal(hex(new Uint8Array(await (await replica.attachment(refs[0])).arrayBuffer())), refs[0].$attachment);
  assert.equal(hex(new Uint8Array(await (await replica.attachment(refs[1])).arrayBuffer())), refs[1].$attachment);
  const server_ = f.seen.filter((r) => r.url.startsWith(server.url) && r.url.includes("/attachments/")).map((r) => r.url.split("/").pop());
  assert.deepEqual(server_, [refs[1].$attachment], "only the damaged one came from the server");
});
