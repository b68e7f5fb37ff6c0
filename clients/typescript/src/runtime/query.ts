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
export function sqlValue(value: unknown): SQLValue {
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
    this.show(await this.engine.run(this.query));
  }

  /** Takes `rows` (the query's result now) as the result; tells the listeners when it differs. @internal */
  show(rows: Row[]): void {
    const old = this.rows;
    if (old && old.length === rows.length && old.every((r, i) => r.id === rows[i].id && r.body === rows[i].body)) return;
    this.rows = rows;
    this.ids = new Set(rows.map((r) => r.id));
    this.snapshot = rows.map((r) => r.record as T);
    for (const listener of [...this.listeners]) listener();
  }
}

/**
 * The live queries and declared indexes of one replica in one tab. Indexes live in the
 * database (`StoredIndexes`, kept by every apply in any tab): declaring one builds it there
 * once, and a query on its field reads only its range. Every change reaches the engine as
 * the ids a committed transaction changed (this tab's, or another's over the
 * BroadcastChannel; `null`: anything may have changed, e.g. a full reset): a live query runs
 * again only when one of them is in its result or now passes its filters. Changes are
 * handled one after another, in commit order.
 */
export class QueryEngine {
  private readonly declared = new Set<string>();
  private readonly live = new Set<LiveQuery<any>>();
  /** Live queries subscribed whose first result is not read yet (read together: see `firstResults`). */
  private readonly unread = new Set<LiveQuery<any>>();
  private tail: Promise<void> = Promise.resolve();
  /** Re-runs of live queries, for tests and benchmarks: unrelated changes must cost none. */
  reruns = 0;

  constructor(private readonly store: ReplicaStore, private readonly onError: (error: unknown) => void) {}

  /**
   * Declares an index on `field`: queries after it wait until it is built in the database (at
   * once when it already is: one read). Rejects when the database cannot build it; queries
   * then read every record.
   */
  declare(field: string): Promise<void> {
    checkField(field);
    if (field === "id" || this.declared.has(field)) return this.enqueue(async () => undefined);
    this.declared.add(field);
    return this.enqueue(async () => { await this.store.createIndex?.(field); });
  }

  /** Forgets the index on `field` (in every tab: it is the database's). */
  drop(field: string): Promise<void> {
    checkField(field);
    this.declared.delete(field);
    return this.enqueue(async () => { await this.store.dropIndex?.(field); });
  }

  /** The records `query` selects now (after every change heard so far). */
  query(query: ReplicaQuery): Promise<Row[]> {
    return this.enqueue(() => this.run(query));
  }

  /**
   * Handles the ids a committed transaction changed (`null`: anything), with the values the
   * app sees of them now where the transaction knew them (`values`; the others are read).
   */
  changed(ids: string[] | null, values?: ReadonlyMap<string, string | null>): void {
    void this.enqueue(() => this.apply(ids, values)).catch(this.onError);
  }

  /** Resolves when every change heard so far has reached the live queries. */
  async settled(): Promise<void> {
    let tail: Promise<void>;
    do { tail = this.tail; await tail; } while (tail !== this.tail);
  }

  watch(live: LiveQuery<any>): void {
    this.live.add(live);
    this.unread.add(live);
    void this.enqueue(() => this.firstResults()).catch(this.onError);
  }

  /**
   * The first results of the live queries subscribed so far (the first of their jobs in the
   * queue reads them all; the later ones find nothing left): queries of one record by id
   * together, in one read of their ids (1,000 observers subscribed at once: one transaction,
   * not 1,000), every other query on its own.
   */
  private async firstResults(): Promise<void> {
    const batch = [...this.unread].filter((live) => this.live.has(live));
    this.unread.clear();
    const byId = new Set(batch.filter((live) => idOf(live.query) !== undefined));
    if (byId.size > 1) {
      const wanted = new Set<string>();
      for (const live of byId) {
        const id = idOf(live.query);
        if (typeof id === "string") wanted.add(id);
      }
      const ids = [...wanted];
      const bodies = await readMany(this.store, ids);
      const found = new Map<string, string | null>();
      ids.forEach((id, i) => found.set(id, bodies[i]));
      for (const live of byId) {
        const id = idOf(live.query);
        const body = typeof id === "string" ? found.get(id) ?? null : null;
        if (this.live.has(live)) live.show(live.query.select(body === null ? [] : [{ id: id!, body, record: JSON.parse(body) }]));
      }
    }
    for (const live of batch) {
      if ((byId.size > 1 && byId.has(live)) || !this.live.has(live)) continue;
      await live.refresh();
    }
  }

  unwatch(live: LiveQuery<any>): void {
    this.live.delete(live);
  }

  private enqueue<T>(job: () => Promise<T>): Promise<T> {
    const run = this.tail.then(job);
    this.tail = run.then(() => undefined, () => undefined);
    return run;
  }

  private async apply(ids: string[] | null, values?: ReadonlyMap<string, string | null>): Promise<void> {
    if (ids === null) {
      for (const live of [...this.live]) { this.reruns++; await live.refresh(); }
      return;
    }
    // Nothing listens: a change costs no read (a sync's cost stays what it was).
    if (ids.length === 0 || this.live.size === 0) return;
    const changed = new Set(ids);
    // A query of one record by id (`filter("id", "=", …)`) is decided by the ids alone: the
    // changed records are needed only when another kind of query listens. Their values come
    // with the change when this tab's transaction wrote them (an apply, a local write, a
    // rollback): only the others (another tab's change, an id that got its server value
    // back) are read.
    const live = [...this.live];
    let records: Map<string, Record<string, unknown> | undefined> | null = null;
    if (live.some((l) => idOf(l.query) === undefined)) {
      const unknown = values ? ids.filter((id) => !values.has(id)) : ids;
      const read = unknown.length ? await readMany(this.store, unknown) : [];
      const bodies = new Map<string, string | null>();
      unknown.forEach((id, i) => bodies.set(id, read[i]));
      records = new Map();
      for (const id of ids) {
        const body = values?.has(id) ? values.get(id)! : bodies.get(id)!;
        records.set(id, body === null ? undefined : JSON.parse(body));
      }
    }
    for (const query of live) {
      const id = idOf(query.query);
      let affected = false;
      if (id !== undefined) affected = id !== null && changed.has(id);
      else {
        for (const [id, record] of records!) {
          if (query.has(id) || (record !== undefined && query.query.matches(record))) { affected = true; break; }
        }
      }
      if (affected && this.live.has(query)) { this.reruns++; await query.refresh(); }
    }
  }

  /**
   * How an index answers `query`, or null: a filter on a declared field (`=` and `whereNull`
   * first), or, with no such filter, an order on one with a limit. The index is read in the
   * query's order and stops at its limit when that filter is the only one and the order starts
   * with its field; otherwise it gives every entry in range.
   */
  private plan(query: ReplicaQuery): { field: string; filter: QueryFilter | null; descending: boolean; limit: number | null } | null {
    const usable = query.filters.filter((f) => this.declared.has(f.field));
    let filter: QueryFilter | null = usable.find((f) => "isNull" in f || f.comparison === "=") ?? usable[0] ?? null;
    const first = query.orders[0];
    let field: string;
    if (filter) field = filter.field;
    else if (first && this.declared.has(first.field) && query.maximumCount !== null && query.filters.length === 0) field = first.field;
    else return null;
    const ordered = first !== undefined && first.field === field && query.maximumCount !== null && query.filters.length <= 1;
    return { field, filter, descending: ordered && first?.descending === true, limit: ordered ? query.maximumCount : null };
  }

  /** Runs `query` through an index when it can, else over every record. Call inside the queue. */
  async run(query: ReplicaQuery): Promise<Row[]> {
    const id = idOf(query);
    let found: [string, string][] | null = null;
    if (id !== undefined) {
      const body = id === null ? null : (await readMany(this.store, [id]))[0];
      found = body === null ? [] : [[id!, body]];
    } else {
      const plan = this.plan(query);
      if (plan && this.store.indexedRows) {
        const scan = { descending: plan.descending, limit: plan.limit };
        found = await this.store.indexedRows(plan.field, plan.filter, scan);
        if (found === null) {
          // Not in this database (built by no one yet, or the database is new): build it, once.
          try { await this.store.createIndex?.(plan.field); } catch (error) { this.onError(error); }
          found = await this.store.indexedRows(plan.field, plan.filter, scan);
        }
      }
    }
    const rows = (found ?? (await this.store.all())).map(([id, body]) => ({ id, body, record: JSON.parse(body) }));
    return query.select(rows);
  }
}

/** The id a query's `id = …` filter names (null: a non-string, which matches nothing), or undefined without one. */
function idOf(query: ReplicaQuery): string | null | undefined {
  const filter = query.filters.find((f) => f.field === "id" && "comparison" in f && f.comparison === "=") as { value: QueryValue } | undefined;
  if (!filter) return undefined;
  return typeof filter.value === "string" ? filter.value : null;
}

function readMany(store: ReplicaStore, ids: string[]): Promise<(string | null)[]> {
  return store.getMany ? store.getMany(ids) : Promise.all(ids.map((id) => store.get(id)));
}
