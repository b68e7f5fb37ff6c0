import { StorageError } from "../protocol/errors.js";
import { deleteAttachmentFiles, openAttachmentFiles } from "./attachment-files.js";
import { MarkerStore, ReplicaStorage, TableKey, TableName, Tables, TABLES, TableStore } from "./store.js";

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** The tables of one IndexedDB transaction. */
class IndexedDBTables implements Tables {
  constructor(private readonly tx: IDBTransaction) {}
  get<T>(table: TableName, key: TableKey): Promise<T | undefined> { return request(this.tx.objectStore(table).get(key)); }
  getAll<T>(table: TableName): Promise<T[]> { return request(this.tx.objectStore(table).getAll()); }
  getAllKeys(table: TableName): Promise<TableKey[]> { return request(this.tx.objectStore(table).getAllKeys()) as Promise<TableKey[]>; }
  put(table: TableName, value: unknown, key: TableKey): void { this.tx.objectStore(table).put(value, key); }
  add(table: TableName, value: unknown, key: TableKey): void { this.tx.objectStore(table).add(value, key); }
  delete(table: TableName, key: TableKey): void { this.tx.objectStore(table).delete(key); }
  clear(table: TableName): void { this.tx.objectStore(table).clear(); }
}

/**
 * The replica in the browser's IndexedDB: one database per collection or partition, its
 * tables as object stores, each {@link TableStore} transaction one IndexedDB
 * transaction (`durability: "strict"`), so a tab closed mid-apply leaves the old state or
 * the new one.
 */
export class IndexedDBStore extends TableStore {
  /** Transactions not finished yet, so a tab about to be frozen can end them. */
  private readonly active = new Set<IDBTransaction>();

  private constructor(readonly db: IDBDatabase, name: string) {
    super(name);
  }

  /** Opens (creating when missing) the database; `created` is true when it did not exist. */
  static async open(name: string): Promise<{ store: IndexedDBStore; created: boolean }> {
    if (typeof indexedDB === "undefined") throw new StorageError("IndexedDB is not available in this context (a private window or a non-browser runtime: use a MemoryStorage there)");
    let created = false;
    // Version 2 added the `refs` table (file references), version 3 `indexes` (declared
    // indexes); an older database is upgraded in place (its file references indexed on first use).
    const open = indexedDB.open(name, 3);
    open.onupgradeneeded = (event) => {
      created = event.oldVersion === 0;
      const db = open.result;
      for (const s of TABLES) if (!db.objectStoreNames.contains(s)) db.createObjectStore(s);
    };
    let db: IDBDatabase;
    try {
      db = await new Promise<IDBDatabase>((resolve, reject) => {
        open.onsuccess = () => resolve(open.result);
        open.onerror = () => reject(open.error);
        open.onblocked = () => reject(new StorageError(`the database "${name}" is blocked by another tab with an older version: close the other tabs`));
      });
    } catch (error) {
      if (error instanceof StorageError) throw error;
      throw new StorageError(`cannot open IndexedDB database "${name}": ${(error as Error)?.message ?? error}`, error);
    }
    const store = new IndexedDBStore(db, name);
    // A tab that deletes the database (the app, or the test of storage loss) must not be
    // blocked by this connection.
    db.onversionchange = () => db.close();
    return { store, created };
  }

  close(): void {
    this.db.close();
  }

  protected abortOpen(): void {
    for (const tx of this.active) {
      try { tx.abort(); } catch { /* finished meanwhile */ }
    }
    this.active.clear();
  }

  protected async runTransaction<T>(mode: "readonly" | "readwrite", body: (t: Tables) => Promise<T>): Promise<T> {
    let tx: IDBTransaction;
    try {
      tx = (this.db.transaction as (s: readonly string[], m: IDBTransactionMode, o?: object) => IDBTransaction)(TABLES, mode, { durability: "strict" });
    } catch (error) {
      throw new StorageError(`IndexedDB refused a transaction: ${(error as Error).message}`, error);
    }
    this.active.add(tx);
    const done = new Promise<void>((resolve, reject) => {
      tx.oncomplete = () => { this.active.delete(tx); resolve(); };
      tx.onabort = () => { this.active.delete(tx); reject(tx.error ?? new StorageError("the transaction was aborted")); };
    });
    let result: T;
    try {
      result = await body(new IndexedDBTables(tx));
    } catch (error) {
      try { tx.abort(); } catch { /* already finished */ }
      done.catch(() => undefined);
      throw error;
    }
    try {
      await done;
    } catch (error) {
      throw new StorageError(`IndexedDB could not commit: ${(error as Error)?.message ?? error} (is the storage quota exhausted?)`, error);
    }
    return result;
  }
}

/**
 * The browser's storage, the default: IndexedDB databases, markers in `localStorage`, and
 * each replica's files in the Origin Private File System (IndexedDB blobs where it is missing).
 */
export const indexedDBStorage: ReplicaStorage = {
  open: (name) => IndexedDBStore.open(name),
  delete: async (name) => {
    await new Promise<void>((resolve) => {
      if (typeof indexedDB === "undefined") return resolve();
      const request = indexedDB.deleteDatabase(name);
      request.onsuccess = request.onerror = request.onblocked = () => resolve();
    });
    await deleteAttachmentFiles(name);
  },
  openFiles: (name) => openAttachmentFiles(name),
  get markers(): MarkerStore | null {
    return (globalThis as { localStorage?: MarkerStore }).localStorage ?? null;
  },
};
