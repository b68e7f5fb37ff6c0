import { StorageError } from "../protocol/errors.js";
import { AttachmentFiles, MemoryFilesByName } from "./attachment-files.js";
import { MarkerStore, ReplicaStorage, TableKey, TableName, Tables, TABLES, TableStore } from "./store.js";

/** IndexedDB's key order: numbers (ascending) before strings (by UTF-16 code units). */
function compareKeys(a: TableKey, b: TableKey): number {
  if (typeof a !== typeof b) return typeof a === "number" ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Values are copied in and out, as IndexedDB's structured clone does: a caller never shares an object with the store. */
const copy = <T>(value: T): T => (value === undefined ? value : structuredClone(value));

/** One database of a {@link MemoryStorage} (or of a {@link MemoryStore} made on its own): its tables, and the line its transactions wait in. */
export class MemoryDatabase {
  readonly tables = new Map<TableName, Map<TableKey, unknown>>(TABLES.map((name) => [name, new Map()]));
  deleted = false;
  /**
   * Rows read, by table (`pages`, `refs`…; `pages:keys` for keys read without their rows):
   * tests pin what a sync step costs by counting, not timing.
   */
  rowsRead: Record<string, number> = {};
  private tail: Promise<unknown> = Promise.resolve();

  /** Counts `rows` read from `table`. */
  noteRead(table: string, rows: number): void {
    this.rowsRead[table] = (this.rowsRead[table] ?? 0) + rows;
  }

  /** Runs transactions one at a time, in the order they were asked for (serializable, as IndexedDB's). */
  serialize<T>(body: () => Promise<T>): Promise<T> {
    const run = this.tail.then(body, body);
    this.tail = run.catch(() => undefined);
    return run;
  }
}

/** One transaction: writes take effect at once and are undone when it aborts. */
class MemoryTables implements Tables {
  private readonly undo: (() => void)[] = [];
  /** Why the transaction cannot go on (aborted, finished), or null. */
  ended: string | null = null;

  constructor(private readonly database: MemoryDatabase, private readonly mode: "readonly" | "readwrite") {}

  private table(name: TableName): Map<TableKey, unknown> {
    if (this.ended !== null) throw new StorageError(`the transaction was ${this.ended}`);
    return this.database.tables.get(name)!;
  }

  private writable(name: TableName): Map<TableKey, unknown> {
    const table = this.table(name);
    if (this.mode === "readonly") throw new StorageError(`a write to "${name}" in a read-only transaction`);
    return table;
  }

  private remember(table: Map<TableKey, unknown>, key: TableKey): void {
    const had = table.has(key);
    const old = table.get(key);
    this.undo.push(() => (had ? table.set(key, old) : table.delete(key)));
  }

  async get<T>(table: TableName, key: TableKey): Promise<T | undefined> {
    this.database.noteRead(table, 1);
    return copy(this.table(table).get(key)) as T | undefined;
  }

  async getAll<T>(table: TableName): Promise<T[]> {
    const rows = this.table(table);
    this.database.noteRead(table, rows.size);
    return [...rows.keys()].sort(compareKeys).map((key) => copy(rows.get(key)) as T);
  }

  async getAllKeys(table: TableName): Promise<TableKey[]> {
    this.database.noteRead(`${table}:keys`, this.table(table).size);
    return [...this.table(table).keys()].sort(compareKeys);
  }

  put(table: TableName, value: unknown, key: TableKey): void {
    const rows = this.writable(table);
    this.remember(rows, key);
    rows.set(key, copy(value));
  }

  add(table: TableName, value: unknown, key: TableKey): void {
    const rows = this.writable(table);
    if (rows.has(key)) throw new StorageError(`the key ${JSON.stringify(key)} exists in "${table}"`);
    this.put(table, value, key);
  }

  delete(table: TableName, key: TableKey): void {
    const rows = this.writable(table);
    this.remember(rows, key);
    rows.delete(key);
  }

  clear(table: TableName): void {
    const rows = this.writable(table);
    const saved = new Map(rows);
    this.undo.push(() => { rows.clear(); saved.forEach((value, key) => rows.set(key, value)); });
    rows.clear();
  }

  /** Undoes every write, newest first. */
  rollback(): void {
    for (const undo of this.undo.reverse()) undo();
    this.undo.length = 0;
  }
}

/**
 * A replica kept in memory: the same {@link TableStore} as in IndexedDB, over maps. For node
 * (tests, scripts, server-side rendering) and pages that must keep nothing. Transactions
 * run one at a time; one that throws (or is aborted by `suspend`) leaves nothing behind.
 * Its data lives as long as its {@link MemoryStorage} (or, made on its own, as the object).
 */
export class MemoryStore extends TableStore {
  private readonly open = new Set<MemoryTables>();
  private closed = false;

  /** A store of its own (`database` is given by a {@link MemoryStorage}). */
  constructor(name = "memory", private readonly database: MemoryDatabase = new MemoryDatabase()) {
    super(name);
  }

  close(): void {
    this.closed = true;
  }

  protected abortOpen(): void {
    for (const tables of this.open) tables.ended = "aborted";
  }

  protected runTransaction<T>(mode: "readonly" | "readwrite", body: (t: Tables) => Promise<T>): Promise<T> {
    if (this.closed || this.database.deleted) return Promise.reject(new StorageError(`the database "${this.name}" is ${this.closed ? "closed" : "deleted"}`));
    // Open from now on (as an IndexedDB transaction is once asked for): `suspend` aborts it even while it waits its turn.
    const tables = new MemoryTables(this.database, mode);
    this.open.add(tables);
    return this.database.serialize(async () => {
      try {
        if (this.database.deleted) throw new StorageError(`the database "${this.name}" is deleted`);
        const result = await body(tables);
        if (tables.ended !== null) throw new StorageError(`the transaction was ${tables.ended}`);
        return result;
      } catch (error) {
        tables.rollback();
        throw error;
      } finally {
        tables.ended ??= "finished";
        this.open.delete(tables);
      }
    });
  }
}

/** Markers in a map. */
class MemoryMarkers implements MarkerStore {
  private readonly values = new Map<string, string>();
  getItem(key: string): string | null { return this.values.get(key) ?? null; }
  setItem(key: string, value: string): void { this.values.set(key, String(value)); }
  removeItem(key: string): void { this.values.delete(key); }
}

/**
 * Storage in memory: databases by name (a view's partitions, several replicas of one
 * collection as several tabs would share them) and the markers, for as long as this object
 * lives. `delete` drops a database and keeps the markers, as a browser evicting IndexedDB
 * does: the next open reports the storage loss.
 *
 * ```ts
 * const replica = await DeltaSnapReplica.open({ collection: "countries", serverURL: "http://127.0.0.1:8080", storage: new MemoryStorage() });
 * ```
 */
export class MemoryStorage implements ReplicaStorage {
  private readonly databases = new Map<string, MemoryDatabase>();
  private readonly files = new MemoryFilesByName();
  readonly markers: MarkerStore = new MemoryMarkers();

  async open(name: string): Promise<{ store: MemoryStore; created: boolean }> {
    let database = this.databases.get(name);
    const created = database === undefined;
    if (!database) {
      database = new MemoryDatabase();
      this.databases.set(name, database);
    }
    return { store: new MemoryStore(name, database), created };
  }

  async delete(name: string): Promise<void> {
    const database = this.databases.get(name);
    if (database) database.deleted = true;
    this.databases.delete(name);
    await this.files.delete(name);
  }

  async openFiles(name: string): Promise<AttachmentFiles> {
    return this.files.open(name);
  }

  /** The names of the databases held, sorted. */
  names(): string[] {
    return [...this.databases.keys()].sort();
  }

  /** The rows read from database `name` since it opened or since {@link resetRowsRead}, by table (see `MemoryDatabase.rowsRead`). */
  rowsRead(name: string): Record<string, number> {
    return { ...(this.databases.get(name)?.rowsRead ?? {}) };
  }

  resetRowsRead(name: string): void {
    const database = this.databases.get(name);
    if (database) database.rowsRead = {};
  }
}
