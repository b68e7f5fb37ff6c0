import { AttachmentError } from "../protocol/errors.js";

/**
 * Where a replica keeps its attachments' bytes and what it knows of each (PROTOCOL.md §12):
 * a ledger of entries (IndexedDB, or memory) and the bytes — the Origin Private File System
 * where the browser has it, IndexedDB blobs where it does not, or memory. Each replica has
 * its own, named after its database, so a view that drops a partition drops its files.
 *
 * An entry's `area`: `pending` (attached here, waiting for upload: never evicted), `cached`
 * (proven bytes, evictable), `partial` (a download cut short, resumed with `Range`).
 */
export interface AttachmentEntry {
  sha256: string;
  size: number;
  type: string;
  area: "pending" | "cached" | "partial";
  /** Last use (ms since 1970), for least-recently-used eviction. */
  used: number;
  /** A pending file's resumable upload (`/v1/uploads/…`), once begun. */
  uploadLocation?: string | null;
}

/**
 * Appends to a file; `close` keeps what was written (also after a cut download). `stream`
 * takes a piped body (the browser's fastest path into OPFS); pipe with `preventAbort` and
 * `preventClose`, then `close`.
 */
export interface FileWriter {
  write(chunk: Uint8Array | Blob): Promise<void>;
  readonly stream: WritableStream<Uint8Array>;
  close(): Promise<void>;
}

/** The bytes of one replica's files, by key (`<sha256>` for whole files, `<sha256>.partial`). */
export interface FileBytes {
  readonly kind: "opfs" | "indexeddb" | "memory";
  /** Where OPFS bytes are (`root`/`folder`/key): a worker opens them by name. */
  readonly opfs?: { root: string; folder: string };
  read(key: string): Promise<Blob | null>;
  size(key: string): Promise<number>;
  writer(key: string, append: boolean): Promise<FileWriter>;
  move(from: string, to: string): Promise<void>;
  remove(key: string): Promise<void>;
  destroy(): Promise<void>;
}

/** The entries of one replica's files. */
export interface FileLedger {
  get(sha256: string): Promise<AttachmentEntry | undefined>;
  all(): Promise<AttachmentEntry[]>;
  put(entry: AttachmentEntry): Promise<void>;
  remove(sha256: string): Promise<void>;
  destroy(): Promise<void>;
}

/** A storage error from the browser, as the {@link AttachmentError} an app acts on. */
export function storageFailure(error: unknown, doing: string): AttachmentError {
  if (error instanceof AttachmentError) return error;
  const name = (error as { name?: string })?.name;
  if (name === "QuotaExceededError") {
    return new AttachmentError("quota_exceeded", `the browser's storage quota is exhausted while ${doing}; records and queued writes are untouched (free space, or ask for persistent storage)`);
  }
  return new AttachmentError("attachment_failed", `storage failed while ${doing}: ${(error as Error)?.message ?? error}`);
}

/**
 * One replica's files: the ledger and the bytes together.
 *
 * ```ts
 * const files = await openAttachmentFiles("deltasnap:notes");
 * const photo = await files.read("9f86…0a08");   // a Blob, or null
 * ```
 */
export class AttachmentFiles {
  constructor(readonly ledger: FileLedger, readonly bytes: FileBytes) {}

  /** The proven (or pending) bytes of `sha256`, or null when not held whole. */
  async read(sha256: string): Promise<Blob | null> {
    const entry = await this.ledger.get(sha256);
    if (!entry || entry.area === "partial") return null;
    const blob = await this.bytes.read(sha256);
    // The bytes went without the ledger (a browser clearing one of the two): forget the entry.
    if (!blob || blob.size !== entry.size) {
      if (entry.area === "cached") await this.ledger.remove(sha256);
      return entry.area === "pending" ? blob : null;
    }
    return blob;
  }

  /** Stores whole bytes of `entry` (already proven), replacing any partial download. */
  async store(entry: AttachmentEntry, data: Blob): Promise<void> {
    try {
      const writer = await this.bytes.writer(entry.sha256, false);
      await writer.write(data);
      await writer.close();
      await this.bytes.remove(entry.sha256 + ".partial");
      await this.ledger.put(entry);
    } catch (error) {
      if (entry.area !== "pending") await this.bytes.remove(entry.sha256).catch(() => undefined);
      throw storageFailure(error, `storing attachment ${entry.sha256}`);
    }
  }

  /** Drops a cached or partial file (a pending one stays: it is not on the server yet). */
  async evict(sha256: string): Promise<void> {
    const entry = await this.ledger.get(sha256);
    if (!entry || entry.area === "pending") return;
    await this.ledger.remove(sha256);
    await this.bytes.remove(sha256);
    await this.bytes.remove(sha256 + ".partial");
  }

  /** Removes every file and entry. */
  async destroy(): Promise<void> {
    await this.bytes.destroy();
    await this.ledger.destroy();
  }
}

// MARK: - Memory

class MemoryLedger implements FileLedger {
  readonly entries = new Map<string, AttachmentEntry>();
  async get(sha256: string) { const e = this.entries.get(sha256); return e && { ...e }; }
  async all() { return [...this.entries.values()].map((e) => ({ ...e })); }
  async put(entry: AttachmentEntry) { this.entries.set(entry.sha256, { ...entry }); }
  async remove(sha256: string) { this.entries.delete(sha256); }
  async destroy() { this.entries.clear(); }
}

/** Bytes as blobs in a map: the memory store's, and what IndexedDB blobs build on. */
class BlobBytes implements FileBytes {
  constructor(
    readonly kind: "indexeddb" | "memory",
    private readonly get: (key: string) => Promise<Blob | undefined>,
    private readonly set: (key: string, blob: Blob | undefined) => Promise<void>,
    readonly destroy: () => Promise<void>,
  ) {}

  async read(key: string) { return (await this.get(key)) ?? null; }
  async size(key: string) { return (await this.get(key))?.size ?? 0; }
  async remove(key: string) { await this.set(key, undefined); }
  async move(from: string, to: string) {
    const blob = await this.get(from);
    await this.set(to, blob);
    await this.set(from, undefined);
  }

  /** Parts are held until `close` (or 8 MiB), then written as one blob with what was there. */
  async writer(key: string, append: boolean): Promise<FileWriter> {
    let parts: BlobPart[] = append ? [(await this.get(key)) ?? new Blob([])] : [];
    let held = 0;
    const flush = async () => {
      await this.set(key, new Blob(parts));
      parts = [(await this.get(key))!];
      held = 0;
    };
    if (!append) await this.set(key, new Blob([]));
    const write = async (chunk: Uint8Array | Blob) => {
      parts.push(chunk as BlobPart);
      held += chunk instanceof Blob ? chunk.size : chunk.byteLength;
      if (held >= 8 << 20) await flush();
    };
    return { write, stream: new WritableStream({ write }), close: flush };
  }
}

function memoryFiles(): AttachmentFiles {
  const blobs = new Map<string, Blob>();
  const bytes = new BlobBytes("memory", async (key) => blobs.get(key), async (key, blob) => { if (blob) blobs.set(key, blob); else blobs.delete(key); }, async () => blobs.clear());
  return new AttachmentFiles(new MemoryLedger(), bytes);
}

/** Memory storage's files, by database name (they live as long as the storage). */
export class MemoryFilesByName {
  private readonly files = new Map<string, AttachmentFiles>();
  open(name: string): AttachmentFiles {
    let files = this.files.get(name);
    if (!files) this.files.set(name, (files = memoryFiles()));
    return files;
  }
  async delete(name: string): Promise<void> {
    await this.files.get(name)?.destroy();
    this.files.delete(name);
  }
}

// MARK: - IndexedDB (the ledger, and the bytes where there is no OPFS)

function idbRequest<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** The name of the IndexedDB database holding a replica's file entries (and blobs without OPFS). */
export function filesDatabaseName(name: string): string {
  return `${name}:files`;
}

async function openFilesDatabase(name: string): Promise<IDBDatabase> {
  const open = indexedDB.open(filesDatabaseName(name), 1);
  open.onupgradeneeded = () => {
    for (const store of ["entries", "bytes"]) if (!open.result.objectStoreNames.contains(store)) open.result.createObjectStore(store);
  };
  const db = await idbRequest(open);
  db.onversionchange = () => db.close();
  return db;
}

function idbOne<T>(db: IDBDatabase, store: string, mode: IDBTransactionMode, act: (s: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    const tx = db.transaction([store], mode);
    let result: T;
    act(tx.objectStore(store)).onsuccess = (event) => { result = (event.target as IDBRequest<T>).result; };
    tx.oncomplete = () => resolve(result);
    tx.onabort = tx.onerror = () => reject(tx.error ?? new Error("the transaction was aborted"));
  });
}

async function deleteFilesDatabase(name: string): Promise<void> {
  await new Promise<void>((resolve) => {
    const request = indexedDB.deleteDatabase(filesDatabaseName(name));
    request.onsuccess = request.onerror = request.onblocked = () => resolve();
  });
}

class IndexedDBLedger implements FileLedger {
  constructor(private readonly db: IDBDatabase, private readonly name: string) {}
  get(sha256: string) { return idbOne<AttachmentEntry | undefined>(this.db, "entries", "readonly", (s) => s.get(sha256)); }
  all() { return idbOne<AttachmentEntry[]>(this.db, "entries", "readonly", (s) => s.getAll()); }
  async put(entry: AttachmentEntry) { await idbOne(this.db, "entries", "readwrite", (s) => s.put(entry, entry.sha256)); }
  async remove(sha256: string) { await idbOne(this.db, "entries", "readwrite", (s) => s.delete(sha256)); }
  async destroy() { this.db.close(); await deleteFilesDatabase(this.name); }
}

// MARK: - Origin Private File System

const OPFS_FOLDER = "deltasnap-files";

async function opfsRoot(): Promise<FileSystemDirectoryHandle | null> {
  const storage = (globalThis as { navigator?: { storage?: { getDirectory?: () => Promise<FileSystemDirectoryHandle> } } }).navigator?.storage;
  if (!storage?.getDirectory) return null;
  // A browser whose OPFS cannot write from a page (no createWritable) takes IndexedDB blobs.
  const handleType = (globalThis as { FileSystemFileHandle?: { prototype: object } }).FileSystemFileHandle;
  if (!handleType || !("createWritable" in handleType.prototype)) return null;
  try {
    return await (await storage.getDirectory()).getDirectoryHandle(OPFS_FOLDER, { create: true });
  } catch {
    return null;
  }
}

/** The OPFS folder (under `deltasnap-files/`) of a replica's files. */
export function opfsFolderName(name: string): string {
  return encodeURIComponent(name);
}

/** OPFS's writable file (newer than this TypeScript's DOM types). */
interface WritableFile extends WritableStream<Uint8Array> {
  write(data: Uint8Array | Blob): Promise<void>;
  seek(position: number): Promise<void>;
  close(): Promise<void>;
}
type WritableHandle = FileSystemFileHandle & { createWritable(options?: { keepExistingData?: boolean }): Promise<WritableFile> };

/**
 * Runs `body` again, a few times over ~150 ms, while OPFS says the file is locked: the download
 * worker closes its access handle before it reports, but the browser may release the lock a
 * moment after the page hears.
 */
async function unlocked<T>(body: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await body();
    } catch (error) {
      if (attempt >= 4 || (error as { name?: string })?.name !== "NoModificationAllowedError") throw error;
      await new Promise((resolve) => setTimeout(resolve, 10 << attempt));
    }
  }
}

class OPFSBytes implements FileBytes {
  readonly kind = "opfs";
  readonly opfs: { root: string; folder: string };
  constructor(private readonly parent: FileSystemDirectoryHandle, private readonly folder: string, private dir: FileSystemDirectoryHandle) {
    this.opfs = { root: OPFS_FOLDER, folder };
  }

  private async handle(key: string, create = false): Promise<FileSystemFileHandle | null> {
    try { return await this.dir.getFileHandle(key, { create }); } catch (error) {
      if (!create && (error as { name?: string })?.name === "NotFoundError") return null;
      if ((error as { name?: string })?.name === "NotFoundError") {
        // The folder went (a storage reset): make it again.
        this.dir = await this.parent.getDirectoryHandle(this.folder, { create: true });
        return this.dir.getFileHandle(key, { create });
      }
      throw error;
    }
  }

  async read(key: string) { return (await (await this.handle(key))?.getFile()) ?? null; }
  async size(key: string) { return (await this.read(key))?.size ?? 0; }
  async remove(key: string) { await this.dir.removeEntry(key).catch(() => undefined); }

  async move(from: string, to: string) {
    const source = await this.handle(from);
    if (!source) return;
    const move = (source as { move?: (name: string) => Promise<void> }).move;
    if (move) {
      await this.remove(to);
      await unlocked(() => move.call(source, to));
      return;
    }
    const writer = await this.writer(to, false);
    await writer.write(await source.getFile());
    await writer.close();
    await this.remove(from);
  }

  async writer(key: string, append: boolean): Promise<FileWriter> {
    const handle = (await this.handle(key, true)) as WritableHandle;
    const writable = await unlocked(() => handle.createWritable({ keepExistingData: append }));
    if (append) await writable.seek((await handle.getFile()).size);
    return { write: (chunk) => writable.write(chunk), stream: writable, close: () => writable.close() };
  }

  async destroy() { await this.parent.removeEntry(this.folder, { recursive: true }).catch(() => undefined); }
}

/**
 * A replica's files in the browser: entries in IndexedDB (`<name>:files`), bytes in OPFS
 * when the browser has it, else as IndexedDB blobs beside the entries.
 */
export async function openAttachmentFiles(name: string): Promise<AttachmentFiles> {
  if (typeof indexedDB === "undefined") return memoryFiles();
  let db: IDBDatabase;
  try { db = await openFilesDatabase(name); } catch (error) { throw storageFailure(error, "opening the attachments' database"); }
  const ledger = new IndexedDBLedger(db, name);
  const root = await opfsRoot();
  if (root) {
    const folder = opfsFolderName(name);
    return new AttachmentFiles(ledger, new OPFSBytes(root, folder, await root.getDirectoryHandle(folder, { create: true })));
  }
  const bytes = new BlobBytes(
    "indexeddb",
    (key) => idbOne<Blob | undefined>(db, "bytes", "readonly", (s) => s.get(key)),
    async (key, blob) => {
      if (blob) await idbOne(db, "bytes", "readwrite", (s) => s.put(blob, key));
      else await idbOne(db, "bytes", "readwrite", (s) => s.delete(key));
    },
    async () => undefined,
  );
  return new AttachmentFiles(ledger, bytes);
}

/** Deletes a replica's files (its entries database and its OPFS folder). */
export async function deleteAttachmentFiles(name: string): Promise<void> {
  if (typeof indexedDB !== "undefined") await deleteFilesDatabase(name);
  const root = await opfsRoot();
  await root?.removeEntry(opfsFolderName(name), { recursive: true }).catch(() => undefined);
}
