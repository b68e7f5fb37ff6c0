// A small Origin Private File System for node tests (test-only; never shipped): the subset
// src/runtime/attachment-files.ts uses — navigator.storage.getDirectory, folders
// (getDirectoryHandle, getFileHandle, removeEntry with recursive), files (getFile, move) and
// writable files (createWritable with keepExistingData, seek, write, close; a WritableStream,
// so a body can be piped in). As in a browser, writes land in a swap copy that only `close`
// makes the file's: a writable dropped without `close` changes nothing.

const notFound = (name) => new DOMException(`${name} was not found`, "NotFoundError");

class FakeFile {
  constructor(name, parent) { this.kind = "file"; this.name = name; this.parent = parent; this.bytes = new Uint8Array(0); }
  async getFile() { return new File([this.bytes], this.name); }
  async move(name) {
    this.parent.entries.delete(this.name);
    this.name = name;
    this.parent.entries.set(name, this);
  }
  async createWritable({ keepExistingData = false } = {}) {
    const file = this;
    let swap = keepExistingData ? file.bytes.slice() : new Uint8Array(0);
    let at = 0;
    const put = async (chunk) => {
      const data = chunk instanceof Blob ? new Uint8Array(await chunk.arrayBuffer()) : new Uint8Array(chunk.buffer ?? chunk, chunk.byteOffset ?? 0, chunk.byteLength);
      if (at + data.length > swap.length) { const grown = new Uint8Array(at + data.length); grown.set(swap); swap = grown; }
      swap.set(data, at);
      at += data.length;
    };
    const stream = new WritableStream({ write: put });
    stream.write = put;
    stream.seek = async (position) => { at = position; };
    const close = WritableStream.prototype.close;
    stream.close = async function () { file.bytes = swap; if (!this.locked) await close.call(this).catch(() => undefined); };
    return stream;
  }
}

class FakeDirectory {
  constructor(name) { this.kind = "directory"; this.name = name; this.entries = new Map(); }
  async getDirectoryHandle(name, { create = false } = {}) {
    let entry = this.entries.get(name);
    if (!entry && create) this.entries.set(name, (entry = new FakeDirectory(name)));
    if (!entry || entry.kind !== "directory") throw notFound(name);
    return entry;
  }
  async getFileHandle(name, { create = false } = {}) {
    let entry = this.entries.get(name);
    if (!entry && create) this.entries.set(name, (entry = new FakeFile(name, this)));
    if (!entry || entry.kind !== "file") throw notFound(name);
    return entry;
  }
  async removeEntry(name, { recursive = false } = {}) {
    const entry = this.entries.get(name);
    if (!entry) throw notFound(name);
    if (entry.kind === "directory" && entry.entries.size && !recursive) throw new DOMException("not empty", "InvalidModificationError");
    this.entries.delete(name);
  }
}

/** Installs an empty OPFS (`navigator.storage.getDirectory`, `FileSystemFileHandle`); returns its root. */
export function installFakeOPFS() {
  const root = new FakeDirectory("");
  globalThis.FileSystemFileHandle = FakeFile;
  const navigator = globalThis.navigator ?? {};
  const storage = { ...(navigator.storage ?? {}), getDirectory: async () => root };
  Object.defineProperty(globalThis, "navigator", { value: { ...navigator, storage }, configurable: true, writable: true });
  return root;
}

/** Removes the fake OPFS again (other tests see no OPFS). */
export function removeFakeOPFS() {
  delete globalThis.FileSystemFileHandle;
  const storage = { ...(globalThis.navigator?.storage ?? {}) };
  delete storage.getDirectory;
  Object.defineProperty(globalThis, "navigator", { value: { ...globalThis.navigator, storage }, configurable: true, writable: true });
}
