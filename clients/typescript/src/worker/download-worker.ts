/// <reference lib="webworker" />
/**
 * The browser client's download worker (dist/download-worker.js, beside deltasnap.js): a file
 * is fetched into OPFS through a synchronous access handle — which only a worker may open,
 * and which writes several times faster than a page's `createWritable` — and its SHA-256 is
 * checked there, off the page's thread. The page (worker/download-client.ts) keeps the
 * ledger and decides what a result means; this side only moves and hashes bytes.
 */
import { SHA256Stream, HASH_IN_MEMORY_UP_TO } from "../protocol/sha256.js";
import { toHex } from "../protocol/webcrypto.js";
import type { WorkerDownload, WorkerReply } from "./download-client.js";

type SyncHandle = {
  read(buffer: Uint8Array, options: { at: number }): number;
  write(buffer: Uint8Array, options: { at: number }): number;
  truncate(size: number): void;
  getSize(): number;
  flush(): void;
  close(): void;
};

const post = (reply: WorkerReply) => (self as unknown as DedicatedWorkerGlobalScope).postMessage(reply);

async function download(job: WorkerDownload): Promise<void> {
  const root = await (await navigator.storage.getDirectory()).getDirectoryHandle(job.root, { create: true });
  const folder = await root.getDirectoryHandle(job.folder, { create: true });
  const file = await folder.getFileHandle(job.key, { create: true });
  const create = (file as unknown as { createSyncAccessHandle?: () => Promise<SyncHandle> }).createSyncAccessHandle;
  if (!create) return post({ id: job.id, kind: "unsupported" });
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), job.timeoutMs);
  let response: Response;
  try {
    response = await fetch(job.url, { headers: job.headers, cache: job.cache, signal: abort.signal });
  } catch {
    return post({ id: job.id, kind: "no-answer" });
  } finally {
    clearTimeout(timer);
  }
  const range = response.headers.get("Content-Range") ?? "";
  const append = response.status === 206 && range.startsWith(`bytes ${job.held}-`);
  if (response.status !== 200 && !append) {
    await response.body?.cancel().catch(() => undefined);
    return post({ id: job.id, kind: "status", status: response.status });
  }
  const handle = await create.call(file);
  // The result is posted only once the handle is closed: the page moves or reads the file as
  // soon as it hears, and OPFS refuses that while this handle still locks it ("cannot be moved
  // while it is locked"; a resume then found nothing to resume from).
  let reply: WorkerReply;
  try {
    reply = await transfer(job, response, handle, append);
  } finally {
    handle.close();
  }
  post(reply);
}

/** The body into the locked file; the final reply (progress is posted on the way). */
async function transfer(job: WorkerDownload, response: Response, handle: SyncHandle, append: boolean): Promise<WorkerReply> {
  let at = append ? job.held : 0;
  let received = 0;
  let reported = 0;
  if (!append) handle.truncate(0);
  const reader = (response.body ?? new Blob([]).stream()).getReader();
  for (;;) {
    let part: ReadableStreamReadResult<Uint8Array>;
    try {
      part = await reader.read();
    } catch {
      handle.flush();
      return { id: job.id, kind: "cut", received, at };
    }
    if (part.done) break;
    const chunk = part.value;
    if (at + chunk.byteLength > job.size) {
      await reader.cancel().catch(() => undefined);
      handle.truncate(0);
      return { id: job.id, kind: "too-long", received: received + chunk.byteLength };
    }
    handle.write(chunk, { at });
    at += chunk.byteLength;
    received += chunk.byteLength;
    if (received - reported >= 1 << 20) {
      reported = received;
      post({ id: job.id, kind: "progress", done: at });
    }
  }
  handle.flush();
  const size = handle.getSize();
  return { id: job.id, kind: "done", received, size, sha256: size === job.size ? await hashOf(handle, size) : null };
}

/** The file's SHA-256: WebCrypto over the whole file up to the in-memory size, else streamed. */
async function hashOf(handle: SyncHandle, size: number): Promise<string> {
  if (size <= HASH_IN_MEMORY_UP_TO) {
    const all = new Uint8Array(size);
    handle.read(all, { at: 0 });
    return toHex(new Uint8Array(await crypto.subtle.digest("SHA-256", all)));
  }
  const hash = new SHA256Stream();
  const piece = new Uint8Array(8 << 20);
  for (let at = 0; at < size; at += piece.length) {
    const n = handle.read(piece, { at });
    hash.update(piece.subarray(0, n));
  }
  return hash.hex();
}

self.onmessage = (event: MessageEvent<WorkerDownload>) => {
  download(event.data).catch((error) => post({ id: event.data.id, kind: "failed", name: (error as Error)?.name ?? "Error", message: String((error as Error)?.message ?? error) }));
};
post({ id: 0, kind: "ready" });
