import { DeltaSnapError } from "../protocol/errors.js";
import { canonicalString, compareUTF8, fromPlain } from "../protocol/json.js";
import type { ReplicaStore } from "./store.js";

/** How a field is compared with a value (the Swift client's `ReplicaQuery.Comparison`). */
export type Comparison = "=" | "!=" | "<" | "<=" | ">" | ">=";
/** What a filter compares a field with: a string, number or boolean (`null` never matches; use `whereNull`). */
export type QueryValue = string | number | boolean | null;
export type QueryFilter = { field: string; comparison: Comparison; value: QueryValue } | { field: string; isNull: true };
export interface QueryOrder { field: string; descending: boolean }

const COMPARISONS: readonly string[] = ["=", "!=", "<", "<=", ">", ">="];
const FIELD = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;

/**
 * A filter-and-order query over a replica's records, by fields of their JSON, with the
 * Swift client's `ReplicaQuery` semantics (SQLite's `json_extract` comparisons), so both
 * clients answer a query alike: numbers (and booleans, as 1 and 0) compare as numbers,
 * strings by their UTF-8 bytes; a missing or `null` field never matches a comparison
 * (`whereNull` finds it); mixed types order null, then numbers, then strings (objects and
 * arrays as their canonical JSON text). Ties are broken by id. Pending local writes are part
 * of what it sees. Immutable: each method returns a new query.
 *
 * ```ts
 * replica.createIndex("city");
 * const lisbon = await replica.query(new ReplicaQuery()
 *   .filter("city", "=", "Lisbon").filter("price", "<", 20).order("price").limit(50));
 * ```
 *
 * A field is a dotted path of names (`owner.email`): letters, digits and `_`, not starting
 * with a digit. Throws `DeltaSnapError` (`invalid_query`) for any other field or value.
 */
export class ReplicaQuery {
  constructor(
    readonly filters: readonly QueryFilter[] = [],
    readonly orders: readonly QueryOrder[] = [],
    readonly maximumCount: number | null = null,
  ) {}

  /** Records whose `field` compares to `value` (a string, number or boolean). */
  filter(field: string, comparison: Comparison, value: QueryValue): ReplicaQuery {
    checkField(field);
    if (!COMPARISONS.includes(comparison)) throw new DeltaSnapError("invalid_query", `"${comparison}" is not a comparison (=, !=, <, <=, >, >=)`);
    if (value !== null && typeof value === "object") throw new DeltaSnapError("invalid_query", "a query compares fields with strings, numbers, booleans or null, not objects or arrays");
    return new ReplicaQuery([...this.filters, { field, comparison, value }], this.orders, this.maximumCount);
  }

  /** Records where `field` is missing or `null`. */
  whereNull(field: string): ReplicaQuery {
    checkField(field);
    return new ReplicaQuery([...this.filters, { field, isNull: true }], this.orders, this.maximumCount);
  }

  /** Orders by `field` (then by id, so the order is total). */
  order(field: string, descending = false): ReplicaQuery {
    checkField(field);
    return new ReplicaQuery(this.filters, [...this.orders, { field, descending }], this.maximumCount);
  }

  /** At most `count` records. */
  limit(count: number): ReplicaQuery {
    return new ReplicaQuery(this.filters, this.orders, Math.max(0, Math.floor(count)));
  }

  /** Whether `record` passes every filter. */
  matches(record: Record<string, unknown>): boolean {
    return this.filters.every((f) => {
      const value = fieldValue(record, f.field);
      if ("isNull" in f) return value === null;
      const wanted = sqlValue(f.value);
      if (value === null || wanted === null) return false;
      return holds(f.comparison, compareSQL(value, wanted));
    });
  }

  /** The records of `rows` (id, body, parsed) this query selects, in its order. */
  select<R extends { id: string; record: Record<string, unknown> }>(rows: R[]): R[] {
    const selected = rows.filter((r) => this.matches(r.record));
    selected.sort((a, b) => {
      for (const o of this.orders) {
        const c = compareSQL(fieldValue(a.record, o.field), fieldValue(b.record, o.field));
        if (c !== 0) return o.descending ? -c : c;
      }
      return compareUTF8(a.id, b.id);
    });
    return this.maximumCount === null ? selected : selected.slice(0, this.maximumCount);
  }
}

function checkField(field: string): void {
  if (typeof field !== "string" || field.length > 256 || !FIELD.test(field)) {
    throw new DeltaSnapError("invalid_query", `cannot query field "${field}": use dotted names of letters, digits and '_' (e.g. owner.email)`);
  }
}

function holds(comparison: Comparison, c: number): boolean {
  switch (comparison) {
    case "=": return c === 0;
    case "!=": return c !== 0;
    case "<": return c < 0;
    case "<=": return c <= 0;
    case ">": return c > 0;
    case ">=": return c >= 0;
  }
}

/** A field's value as SQLite's `json_extract` gives it: NULL (null), a number, or text. */
export type SQLValue = null | number | string;

/** SQLite's value of a JSON value: booleans are 1 and 0, objects and arrays their JSON text. */
function sqlValue(value: unknown): SQLValue {
  if (value === null || value === undefined) return null;
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "number" || typeof value === "string") return value;
  return canonicalString(fromPlain(value));
}

/** `field` (a dotted path) of `record`; own properties only, so `constructor` is a field like any. */
export function fieldValue(record: Record<string, unknown>, field: string): SQLValue {
  let value: unknown = record;
  for (const name of field.split(".")) {
    if (value === null || typeof value !== "object" || Array.isArray(value) || !Object.prototype.hasOwnProperty.call(value, name)) return null;
    value = (value as Record<string, unknown>)[name];
  }
  return sqlValue(value);
}

/** SQLite's order of values: NULL, then numbers by value, then text by its UTF-8 bytes. */
export function compareSQL(a: SQLValue, b: SQLValue): number {
  const ra = a === null ? 0 : typeof a === "number" ? 1 : 2;
  const rb = b === null ? 0 : typeof b === "number" ? 1 : 2;
  if (ra !== rb) return ra - rb;
  if (ra === 1) return (a as number) < (b as number) ? -1 : (a as number) > (b as number) ? 1 : 0;
  if (ra === 2) return compareUTF8(a as string, b as string);
  return 0;
}

/**
 * A declared index: every visible record's value of one field, sorted (then by id), kept in
 * this tab's memory and moved with the ids each transaction changes. A filter on the field
 * reads only the records in its range instead of every record.
 */
export class FieldIndex {
  private readonly byId = new Map<string, SQLValue>();
  private entries: { value: SQLValue; id: string }[] = [];

  constructor(readonly field: string) {}

  /** Rebuilds the index from every visible record. */
  rebuild(rows: Iterable<[string, Record<string, unknown>]>): void {
    this.byId.clear();
    this.entries = [];
    for (const [id, record] of rows) {
      const value = fieldValue(record, this.field);
      this.byId.set(id, value);
      this.entries.push({ value, id });
    }
    this.entries.sort(compareEntries);
  }

  /** Moves `id` to its new value (`undefined`: the record is gone). */
  set(id: string, record: Record<string, unknown> | undefined): void {
    if (this.byId.has(id)) {
      const at = this.position({ value: this.byId.get(id)!, id });
      this.entries.splice(at, 1);
      this.byId.delete(id);
    }
    if (record === undefined) return;
    const entry = { value: fieldValue(record, this.field), id };
    this.entries.splice(this.position(entry), 0, entry);
    this.byId.set(id, entry.value);
  }

  /** The ids a filter on this field can select (a superset is fine: the filters run again on the records). */
  candidates(filter: QueryFilter): string[] {
    const nullEnd = this.bound((v) => v !== null);
    if ("isNull" in filter) return this.ids(0, nullEnd);
    const wanted = sqlValue(filter.value);
    if (wanted === null) return [];
    const lower = this.bound((v) => compareSQL(v, wanted) >= 0);
    const upper = this.bound((v) => compareSQL(v, wanted) > 0);
    switch (filter.comparison) {
      case "=": return this.ids(lower, upper);
      case "!=": return this.ids(nullEnd, lower).concat(this.ids(upper, this.entries.length));
      case "<": return this.ids(nullEnd, lower);
      case "<=": return this.ids(nullEnd, upper);
      case ">": return this.ids(upper, this.entries.length);
      case ">=": return this.ids(lower, this.entries.length);
    }
  }

  get size(): number {
    return this.entries.length;
  }

  private ids(from: number, to: number): string[] {
    const out: string[] = [];
    for (let i = from; i < to; i++) out.push(this.entries[i].id);
    return out;
  }

  /** The first position whose value satisfies `above` (values are sorted, so `above` is monotone). */
  private bound(above: (value: SQLValue) => boolean): number {
    let lo = 0;
    let hi = this.entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (above(this.entries[mid].value)) hi = mid; else lo = mid + 1;
    }
    return lo;
  }

  private position(entry: { value: SQLValue; id: string }): number {
    let lo = 0;
    let hi = this.entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareEntries(this.entries[mid], entry) < 0) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
}

function compareEntries(a: { value: SQLValue; id: string }, b: { value: SQLValue; id: string }): number {
  return compareSQL(a.value, b.value) || compareUTF8(a.id, b.id);
}

type Row = { id: string; body: string; record: Record<string, unknown> };

/**
 * A query kept current: `subscribe` + `getSnapshot`, the contract of React's
 * `useSyncExternalStore` (both are bound functions, so pass them as they are). The
 * snapshot is `undefined` until the first result, then the same array until the result
 * changes; a listener is called only when it changed.
 *
 * ```tsx
 * const europe = replica.liveQuery(new ReplicaQuery().filter("region", "=", "Europe").order("name"));
 * function Countries() {
 *   const rows = useSyncExternalStore(europe.subscribe, europe.getSnapshot);
 *   return rows ? <List rows={rows} /> : <Spinner />;
 * }
 * ```
 */
export class LiveQuery<T = Record<string, unknown>> {
  private rows: Row[] | null = null;
  private ids = new Set<string>();
  private snapshot: T[] | undefined = undefined;
  private readonly listeners = new Set<() => void>();

  /** @internal */
  constructor(readonly query: ReplicaQuery, private readonly engine: QueryEngine) {}

  /** Calls `listener` whenever the result changes (and once with the first result); returns the unsubscribe. */
  readonly subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    if (this.listeners.size === 1) this.engine.watch(this);
    else if (this.snapshot !== undefined) queueMicrotask(() => this.listeners.has(listener) && listener());
    return () => {
      if (this.listeners.delete(listener) && this.listeners.size === 0) this.engine.unwatch(this);
    };
  };

  /** The current result, `undefined` before the first one; the same array while it does not change. */
  readonly getSnapshot = (): T[] | undefined => this.snapshot;

  /** Whether `id` is in the current result. */
  has(id: string): boolean {
    return this.ids.has(id);
  }

  /** Runs the query again; tells the listeners when the result differs. @internal */
  async refresh(): Promise<void> {
    const rows = await this.engine.run(this.query);
    const old = this.rows;
    if (old && old.length === rows.length && old.every((r, i) => r.id === rows[i].id && r.body === rows[i].body)) return;
    this.rows = rows;
    this.ids = new Set(rows.map((r) => r.id));
    this.snapshot = rows.map((r) => r.record as T);
    for (const listener of [...this.listeners]) listener();
  }
}

/**
 * The live queries and declared indexes of one replica in one tab. Every change reaches it
 * as the ids a committed transaction changed (this tab's, or another's over the
 * BroadcastChannel; `null`: anything may have changed, e.g. a full reset): indexes move
 * those ids, and a live query runs again only when one of them is in its result or now
 * passes its filters. Changes are handled one after another, in commit order.
 */
export class QueryEngine {
  private readonly indexes = new Map<string, FieldIndex>();
  /** Indexes declared but not built yet (built on first use, from one read of every record). */
  private readonly unbuilt = new Set<string>();
  private readonly live = new Set<LiveQuery<any>>();
  private tail: Promise<void> = Promise.resolve();
  /** Re-runs of live queries, for tests and benchmarks: unrelated changes must cost none. */
  reruns = 0;

  constructor(private readonly store: ReplicaStore, private readonly onError: (error: unknown) => void) {}

  /** Declares an index on `field` (built on first use). */
  declare(field: string): void {
    checkField(field);
    if (field === "id" || this.indexes.has(field)) return;
    this.indexes.set(field, new FieldIndex(field));
    this.unbuilt.add(field);
  }

  /** The records `query` selects now (after every change heard so far). */
  query(query: ReplicaQuery): Promise<Row[]> {
    return this.enqueue(() => this.run(query));
  }

  /** Handles the ids a committed transaction changed (`null`: anything). */
  changed(ids: string[] | null): void {
    void this.enqueue(() => this.apply(ids)).catch(this.onError);
  }

  /** Resolves when every change heard so far has reached the live queries. */
  async settled(): Promise<void> {
    let tail: Promise<void>;
    do { tail = this.tail; await tail; } while (tail !== this.tail);
  }

  watch(live: LiveQuery<any>): void {
    this.live.add(live);
    void this.enqueue(() => live.refresh()).catch(this.onError);
  }

  unwatch(live: LiveQuery<any>): void {
    this.live.delete(live);
  }

  private enqueue<T>(job: () => Promise<T>): Promise<T> {
    const run = this.tail.then(job);
    this.tail = run.then(() => undefined, () => undefined);
    return run;
  }

  private async apply(ids: string[] | null): Promise<void> {
    if (ids === null) {
      for (const field of this.indexes.keys()) this.unbuilt.add(field);
      for (const live of [...this.live]) { this.reruns++; await live.refresh(); }
      return;
    }
    // Nothing listens and no index is built: a change costs no read (a sync's cost stays what it was).
    if (ids.length === 0 || (this.live.size === 0 && this.unbuilt.size === this.indexes.size)) return;
    const bodies = await readMany(this.store, ids);
    const records = new Map<string, Record<string, unknown> | undefined>();
    ids.forEach((id, i) => records.set(id, bodies[i] === null ? undefined : JSON.parse(bodies[i]!)));
    for (const [field, index] of this.indexes) {
      if (this.unbuilt.has(field)) continue;
      for (const [id, record] of records) index.set(id, record);
    }
    for (const live of [...this.live]) {
      let affected = false;
      for (const [id, record] of records) {
        if (live.has(id) || (record !== undefined && live.query.matches(record))) { affected = true; break; }
      }
      if (affected && this.live.has(live)) { this.reruns++; await live.refresh(); }
    }
  }

  /** Runs `query` through an index when a filter has one, else over every record. Call inside the queue. */
  async run(query: ReplicaQuery): Promise<Row[]> {
    const idFilter = query.filters.find((f) => f.field === "id" && "comparison" in f && f.comparison === "=") as { value: QueryValue } | undefined;
    let ids: string[] | null = null;
    if (idFilter) ids = typeof idFilter.value === "string" ? [idFilter.value] : [];
    else {
      const filter = query.filters.find((f) => this.indexes.has(f.field));
      if (filter) {
        if (this.unbuilt.size) await this.build();
        ids = this.indexes.get(filter.field)!.candidates(filter);
      }
    }
    let rows: Row[];
    if (ids === null) {
      rows = (await this.store.all()).map(([id, body]) => ({ id, body, record: JSON.parse(body) }));
    } else {
      const bodies = await readMany(this.store, ids);
      rows = [];
      ids.forEach((id, i) => { const body = bodies[i]; if (body !== null) rows.push({ id, body, record: JSON.parse(body) }); });
    }
    return query.select(rows);
  }

  private async build(): Promise<void> {
    const rows = (await this.store.all()).map(([id, body]): [string, Record<string, unknown>] => [id, JSON.parse(body)]);
    for (const field of this.unbuilt) this.indexes.get(field)!.rebuild(rows);
    this.unbuilt.clear();
  }
}

function readMany(store: ReplicaStore, ids: string[]): Promise<(string | null)[]> {
  return store.getMany ? store.getMany(ids) : Promise.all(ids.map((id) => store.get(id)));
}
