// A small in-memory IndexedDB for node tests (test-only; never shipped): the subset
// src/runtime/indexeddb-store.ts uses — open (with upgradeneeded, blocked and error),
// deleteDatabase, transactions over object stores (get, getAll, getAllKeys, put, add,
// delete, clear), commit when no request is left, abort with rollback, onversionchange.
//
// It keeps the rules a bug would break in a browser: request callbacks fire in later
// macrotasks (setImmediate), and a transaction commits as soon as control returns to the
// event loop with no request pending — so a transaction body that awaits anything but its
// own requests (a fetch, WebCrypto) finds its transaction finished, as in a browser
// (TransactionInactiveError). Transactions on one database run one at a time, in the order
// they were created; their writes are undone when they abort.

const compareKeys = (a, b) => (typeof a !== typeof b ? (typeof a === "number" ? -1 : 1) : a < b ? -1 : a > b ? 1 : 0);
const clone = (value) => (value === undefined ? undefined : structuredClone(value));
const domError = (name, message) => new DOMException(message, name);

class FakeRequest {
  constructor(source = null) {
    this.source = source;
    this.result = undefined;
    this.error = null;
    this.readyState = "pending";
    this.onsuccess = null;
    this.onerror = null;
  }
  succeed(result) {
    this.readyState = "done";
    this.result = result;
    this.onsuccess?.({ target: this });
  }
  fail(error) {
    this.readyState = "done";
    this.error = error;
    const event = { target: this, defaultPrevented: false, preventDefault() { this.defaultPrevented = true; } };
    this.onerror?.(event);
    return event.defaultPrevented;
  }
}

class FakeObjectStore {
  constructor(tx, name) {
    this.transaction = tx;
    this.name = name;
  }
  rows() { return this.transaction.db.data.get(this.name); }
  get(key) { return this.transaction.request(this, () => clone(this.rows().get(key))); }
  getAll() { return this.transaction.request(this, () => [...this.rows().keys()].sort(compareKeys).map((k) => clone(this.rows().get(k)))); }
  getAllKeys() { return this.transaction.request(this, () => [...this.rows().keys()].sort(compareKeys)); }
  put(value, key) { return this.transaction.write(this, () => this.set(key, value)); }
  add(value, key) {
    return this.transaction.write(this, () => {
      if (this.rows().has(key)) throw domError("ConstraintError", `key ${key} already exists in "${this.name}"`);
      this.set(key, value);
    });
  }
  delete(key) {
    return this.transaction.write(this, () => {
      const rows = this.rows();
      const had = rows.has(key);
      const old = rows.get(key);
      this.transaction.undo.push(() => (had ? rows.set(key, old) : rows.delete(key)));
      rows.delete(key);
    });
  }
  clear() {
    return this.transaction.write(this, () => {
      const rows = this.rows();
      const saved = new Map(rows);
      this.transaction.undo.push(() => { rows.clear(); saved.forEach((v, k) => rows.set(k, v)); });
      rows.clear();
    });
  }
  set(key, value) {
    const rows = this.rows();
    const had = rows.has(key);
    const old = rows.get(key);
    this.transaction.undo.push(() => (had ? rows.set(key, old) : rows.delete(key)));
    rows.set(key, clone(value));
    return key;
  }
}

class FakeTransaction {
  constructor(db, names, mode) {
    this.db = db;
    this.names = names;
    this.mode = mode;
    this.error = null;
    this.oncomplete = null;
    this.onabort = null;
    this.queue = [];
    this.undo = [];
    this.started = false;
    this.finished = false;
    this.running = 0;
  }
  objectStore(name) {
    if (this.finished) throw domError("InvalidStateError", "the transaction has finished");
    if (!this.names.includes(name)) throw domError("NotFoundError", `"${name}" is not in this transaction's scope`);
    return new FakeObjectStore(this, name);
  }
  request(store, operation) {
    if (this.finished) throw domError("TransactionInactiveError", "the transaction has finished (did its body await something other than its own requests?)");
    const request = new FakeRequest(store);
    this.queue.push({ request, operation });
    this.pump();
    return request;
  }
  write(store, operation) {
    if (this.mode === "readonly") throw domError("ReadOnlyError", "a write in a read-only transaction");
    return this.request(store, operation);
  }
  start() {
    this.started = true;
    this.pump();
    this.scheduleCommit();
  }
  /** Runs the queued requests, one per macrotask, as a browser fires their events. */
  pump() {
    if (!this.started || this.running || this.finished) return;
    const next = this.queue.shift();
    if (!next) return;
    this.running++;
    setImmediate(() => {
      this.running--;
      if (this.finished) return;
      let result;
      try {
        result = next.operation();
      } catch (error) {
        if (!next.request.fail(error)) this.abort(error);
        return;
      }
      next.request.succeed(result);
      this.pump();
      this.scheduleCommit();
    });
  }
  /** Commits once control is back in the event loop with no request pending. */
  scheduleCommit() {
    setImmediate(() => {
      if (this.finished || this.running || this.queue.length) return;
      const failure = this.db.factory.failNextCommit;
      if (failure) {
        this.db.factory.failNextCommit = null;
        this.abort(failure);
        return;
      }
      this.finished = true;
      this.db.finished(this);
      setImmediate(() => this.oncomplete?.({ target: this }));
    });
  }
  abort(error = null) {
    if (this.finished) throw domError("InvalidStateError", "the transaction has finished");
    this.finished = true;
    this.error = error;
    for (const undo of this.undo.reverse()) undo();
    const pending = this.queue.splice(0);
    this.db.finished(this);
    setImmediate(() => {
      for (const { request } of pending) request.fail(domError("AbortError", "the transaction was aborted"));
      this.onabort?.({ target: this });
    });
  }
}

class FakeDatabase {
  constructor(factory, name, record) {
    this.factory = factory;
    this.name = name;
    this.record = record;
    this.data = record.data;
    this.closed = false;
    this.onversionchange = null;
    this.waiting = [];
    this.current = null;
  }
  get objectStoreNames() {
    const names = [...this.data.keys()];
    return { contains: (name) => this.data.has(name), length: names.length, item: (i) => names[i] };
  }
  createObjectStore(name) {
    this.data.set(name, new Map());
    return {};
  }
  transaction(names, mode = "readonly") {
    if (this.closed) throw domError("InvalidStateError", "the database connection is closing");
    const scope = typeof names === "string" ? [names] : [...names];
    for (const name of scope) if (!this.data.has(name)) throw domError("NotFoundError", `no object store "${name}"`);
    const tx = new FakeTransaction(this, scope, mode);
    this.factory.transactions++;
    this.waiting.push(tx);
    this.next();
    return tx;
  }
  /** One transaction at a time, in creation order. */
  next() {
    if (this.current && !this.current.finished) return;
    this.current = this.waiting.shift() ?? null;
    this.current?.start();
  }
  finished(tx) {
    if (this.current === tx) {
      this.current = null;
      this.next();
    } else {
      this.waiting = this.waiting.filter((t) => t !== tx);
    }
  }
  close() {
    this.closed = true;
    this.record.connections.delete(this);
  }
}

/** `indexedDB` for node: install it as `globalThis.indexedDB`. */
export class FakeIndexedDB {
  constructor() {
    this.databases = new Map();
    /** Test hooks: the next open is blocked / fails; the next commit fails with this error. */
    this.blockNextOpen = false;
    this.failNextOpen = null;
    this.failNextCommit = null;
    this.transactions = 0;
  }
  open(name, version = 1) {
    const request = new FakeRequest();
    request.onupgradeneeded = null;
    request.onblocked = null;
    setImmediate(() => {
      if (this.blockNextOpen) {
        this.blockNextOpen = false;
        request.onblocked?.({ target: request });
        return;
      }
      if (this.failNextOpen) {
        const error = this.failNextOpen;
        this.failNextOpen = null;
        request.fail(error);
        return;
      }
      let record = this.databases.get(name);
      const oldVersion = record?.version ?? 0;
      if (!record) {
        record = { version: 0, data: new Map(), connections: new Set() };
        this.databases.set(name, record);
      }
      const db = new FakeDatabase(this, name, record);
      record.connections.add(db);
      request.result = db;
      if (oldVersion < version) {
        record.version = version;
        request.onupgradeneeded?.({ target: request, oldVersion, newVersion: version });
      }
      request.succeed(db);
    });
    return request;
  }
  deleteDatabase(name) {
    const request = new FakeRequest();
    request.onblocked = null;
    setImmediate(() => {
      const record = this.databases.get(name);
      if (record) {
        for (const db of [...record.connections]) db.onversionchange?.({ target: db, oldVersion: record.version, newVersion: null });
        if (record.connections.size) request.onblocked?.({ target: request });
        this.databases.delete(name);
      }
      request.succeed(undefined);
    });
    return request;
  }
  /** The database names held (not part of IndexedDB: for assertions). */
  names() {
    return [...this.databases.keys()].sort();
  }
}

/** Markers in a map, as `localStorage`. */
export class FakeLocalStorage {
  constructor() { this.values = new Map(); }
  getItem(key) { return this.values.has(key) ? this.values.get(key) : null; }
  setItem(key, value) { this.values.set(key, String(value)); }
  removeItem(key) { this.values.delete(key); }
  clear() { this.values.clear(); }
}

/** Installs a fresh fake `indexedDB` and `localStorage` on globalThis; returns them. */
export function installFakeBrowserStorage() {
  const indexedDB = new FakeIndexedDB();
  const localStorage = new FakeLocalStorage();
  Object.defineProperty(globalThis, "indexedDB", { value: indexedDB, configurable: true, writable: true });
  Object.defineProperty(globalThis, "localStorage", { value: localStorage, configurable: true, writable: true });
  return { indexedDB, localStorage };
}
