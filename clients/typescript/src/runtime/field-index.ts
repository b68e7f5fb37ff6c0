import { compareUTF8 } from "../protocol/json.js";
import { compareSQL, fieldValue, sqlValue } from "./query.js";
import type { QueryFilter, SQLValue } from "./query.js";
import type { Tables } from "./store.js";

/**
 * Declared indexes, kept in the database beside the records (table `indexes`) and changed in
 * the transaction that changes the records — so a page load finds them built, and a query on
 * an indexed field reads only the index pages its range covers, never every record.
 *
 * An index on a field holds every server record's entry `(value, id, body)`, sorted by value
 * (SQLite's order: null, numbers, text by UTF-8 bytes; see `compareSQL`) then by id (UTF-8),
 * in pages of a few hundred entries (one IndexedDB row each, as `RecordPages`: Chromium
 * spends ~50–100 µs per row written, so one row per entry would make a 100,000-record full
 * body seconds slower per index). The body is in the entry: a query reads its results from
 * the pages of its range, not from the record pages they are scattered over (an index costs
 * about the records' size again). Local values (the overlay: pending writes) are not in it;
 * a query reads them beside it.
 *
 * Rows of `indexes`: `<field>` → the directory `{ next, pages: [{ key, value, id }] }` (each
 * page's key number and first entry, in order); `<field>#<key>` → a page `{ values, ids, bodies }`.
 * `meta` row `indexes` lists the fields indexed: every apply, in any tab, keeps all of them.
 */
interface IndexPage { values: SQLValue[]; ids: string[]; bodies: string[] }
interface PageRef { key: number; value: SQLValue; id: string }
interface Directory { next: number; pages: PageRef[] }

const TABLE = "indexes";
const LIST = "indexes";
const PAGE_SIZE = 256;
const MAX_PAGE = 2 * PAGE_SIZE;

const compareEntry = (av: SQLValue, aid: string, bv: SQLValue, bid: string): number => compareSQL(av, bv) || compareUTF8(aid, bid);

/** A range of values as two monotone tests: `from(v)` holds from the range's first value on, `to(v)` from just past its last. */
interface ValueRange { from: (v: SQLValue) => boolean; to: (v: SQLValue) => boolean }

const always = () => true;
const never = () => false;
const nonNull = (v: SQLValue) => v !== null;

/** The ranges of values a filter selects (none: every entry, for an ordered scan). */
function rangesOf(filter: QueryFilter | null): ValueRange[] {
  if (filter === null) return [{ from: always, to: never }];
  if ("isNull" in filter) return [{ from: always, to: nonNull }];
  const wanted = sqlValue(filter.value);
  if (wanted === null) return [];
  const atOrAbove = (v: SQLValue) => v !== null && compareSQL(v, wanted) >= 0;
  const above = (v: SQLValue) => v !== null && compareSQL(v, wanted) > 0;
  switch (filter.comparison) {
    case "=": return [{ from: atOrAbove, to: above }];
    case "!=": return [{ from: nonNull, to: atOrAbove }, { from: above, to: never }];
    case "<": return [{ from: nonNull, to: atOrAbove }];
    case "<=": return [{ from: nonNull, to: above }];
    case ">": return [{ from: above, to: never }];
    case ">=": return [{ from: atOrAbove, to: never }];
  }
}

/** The first position of `n` whose item passes `test` (monotone: false… then true…). */
function firstPassing(n: number, test: (i: number) => boolean): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (test(mid)) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/** How a scan of an index is read: in its order or backwards, stopping after `limit` entries (and their ties). */
export interface IndexScan { descending: boolean; limit: number | null; skip: ReadonlySet<string> }

/** One field's index inside one transaction: the pages it touched, written back by `flush`. */
class FieldPages {
  private readonly cache = new Map<number, IndexPage>();
  private readonly dirty = new Set<number>();

  constructor(private readonly t: Tables, readonly field: string, private readonly dir: Directory) {}

  static async open(t: Tables, field: string): Promise<FieldPages | null> {
    const dir = await t.get<Directory>(TABLE, field);
    return dir ? new FieldPages(t, field, dir) : null;
  }

  /** Writes a new index of `records` (sorted here), replacing what the field had. */
  static build(t: Tables, field: string, records: [string, string, Record<string, unknown>][], old: Directory | undefined): void {
    if (old) for (const ref of old.pages) t.delete(TABLE, `${field}#${ref.key}`);
    const entries = records.map(([id, body, record]) => ({ value: fieldValue(record, field), id, body }));
    entries.sort((a, b) => compareEntry(a.value, a.id, b.value, b.id));
    const dir: Directory = { next: 0, pages: [] };
    for (let i = 0; i < entries.length; i += PAGE_SIZE) {
      const slice = entries.slice(i, i + PAGE_SIZE);
      const key = dir.next++;
      t.put(TABLE, { values: slice.map((e) => e.value), ids: slice.map((e) => e.id), bodies: slice.map((e) => e.body) } as IndexPage, `${field}#${key}`);
      dir.pages.push({ key, value: slice[0].value, id: slice[0].id });
    }
    t.put(TABLE, dir, field);
  }

  /** The page (position in the directory) that holds or would hold the entry. */
  private route(value: SQLValue, id: string): number {
    const pages = this.dir.pages;
    return Math.max(0, firstPassing(pages.length, (i) => compareEntry(pages[i].value, pages[i].id, value, id) > 0) - 1);
  }

  private async page(at: number): Promise<IndexPage> {
    const key = this.dir.pages[at].key;
    let page = this.cache.get(key);
    if (!page) {
      page = (await this.t.get<IndexPage>(TABLE, `${this.field}#${key}`)) ?? { values: [], ids: [], bodies: [] };
      this.cache.set(key, page);
    }
    return page;
  }

  async remove(value: SQLValue, id: string): Promise<void> {
    if (this.dir.pages.length === 0) return;
    const at = this.route(value, id);
    const page = await this.page(at);
    const i = firstPassing(page.ids.length, (j) => compareEntry(page.values[j], page.ids[j], value, id) >= 0);
    if (i < page.ids.length && page.ids[i] === id) {
      page.values.splice(i, 1);
      page.ids.splice(i, 1);
      page.bodies.splice(i, 1);
      this.dirty.add(this.dir.pages[at].key);
    }
  }

  async insert(value: SQLValue, id: string, body: string): Promise<void> {
    if (this.dir.pages.length === 0) this.dir.pages.push({ key: this.dir.next++, value, id });
    const at = this.route(value, id);
    const page = await this.page(at);
    const i = firstPassing(page.ids.length, (j) => compareEntry(page.values[j], page.ids[j], value, id) >= 0);
    if (i < page.ids.length && page.ids[i] === id) page.bodies[i] = body;
    else {
      page.values.splice(i, 0, value);
      page.ids.splice(i, 0, id);
      page.bodies.splice(i, 0, body);
    }
    this.dirty.add(this.dir.pages[at].key);
  }

  /** Writes the changed pages (split past `MAX_PAGE`, gone when empty) and the directory. */
  flush(): void {
    if (this.dirty.size === 0) return;
    const pages: PageRef[] = [];
    for (const ref of this.dir.pages) {
      if (!this.dirty.has(ref.key)) { pages.push(ref); continue; }
      const page = this.cache.get(ref.key)!;
      if (page.ids.length === 0) { this.t.delete(TABLE, `${this.field}#${ref.key}`); continue; }
      const size = page.ids.length > MAX_PAGE ? PAGE_SIZE : page.ids.length;
      for (let start = 0; start < page.ids.length; start += size) {
        const key = start === 0 ? ref.key : this.dir.next++;
        const chunk: IndexPage = { values: page.values.slice(start, start + size), ids: page.ids.slice(start, start + size), bodies: page.bodies.slice(start, start + size) };
        this.t.put(TABLE, chunk, `${this.field}#${key}`);
        pages.push({ key, value: chunk.values[0], id: chunk.ids[0] });
      }
    }
    this.dir.pages = pages;
    this.t.put(TABLE, this.dir, this.field);
    this.dirty.clear();
  }

  /** The entries (id, body) `filter` selects, in index order or backwards, skipping `scan.skip`. */
  async select(filter: QueryFilter | null, scan: IndexScan): Promise<[string, string][]> {
    const refs = this.dir.pages;
    const out: [string, string][] = [];
    if (scan.limit === 0) return out;
    let tie: SQLValue | undefined;
    let ranges = rangesOf(filter);
    if (scan.descending) ranges = [...ranges].reverse();
    for (const range of ranges) {
      // Pages from the one holding the range's first value to the last whose first entry is before its end.
      const first = Math.max(0, firstPassing(refs.length, (i) => range.from(refs[i].value)) - 1);
      const last = firstPassing(refs.length, (i) => range.to(refs[i].value)) - 1;
      if (last < first) continue;
      const order: number[] = [];
      for (let i = first; i <= last; i++) order.push(i);
      if (scan.descending) order.reverse();
      // Unlimited: every page of the range at once (IndexedDB answers them in one go).
      const loaded = scan.limit === null ? await Promise.all(order.map((i) => this.page(i))) : null;
      for (let n = 0; n < order.length; n++) {
        const page = loaded ? loaded[n] : await this.page(order[n]);
        const from = firstPassing(page.values.length, (j) => range.from(page.values[j]));
        const to = firstPassing(page.values.length, (j) => range.to(page.values[j]));
        for (let k = 0; k < to - from; k++) {
          const j = scan.descending ? to - 1 - k : from + k;
          if (scan.skip.has(page.ids[j])) continue;
          // Past the limit, entries equal to the last one kept still count (the order breaks their tie by id, or by another field).
          if (tie !== undefined && compareSQL(page.values[j], tie) !== 0) return out;
          out.push([page.ids[j], page.bodies[j]]);
          if (scan.limit !== null && out.length >= scan.limit && tie === undefined) tie = page.values[j];
        }
      }
    }
    return out;
  }
}

/** The declared indexes of one database inside one transaction (see the module's comment). */
export class StoredIndexes {
  private readonly open = new Map<string, FieldPages>();

  private constructor(private readonly t: Tables, readonly fields: string[]) {}

  /** The indexes of this transaction; `reading`: a field whose directory is read at once, in parallel (a query's). */
  static async open(t: Tables, reading?: string): Promise<StoredIndexes> {
    const [fields, dir] = await Promise.all([t.get<string[]>("meta", LIST), reading === undefined ? undefined : t.get<Directory>(TABLE, reading)]);
    const indexes = new StoredIndexes(t, fields ?? []);
    if (reading !== undefined && dir) indexes.open.set(reading, new FieldPages(t, reading, dir));
    return indexes;
  }

  /** Whether no field is indexed (a change then costs nothing more). */
  get empty(): boolean {
    return this.fields.length === 0;
  }

  private async field(field: string): Promise<FieldPages> {
    let pages = this.open.get(field);
    if (!pages) {
      pages = (await FieldPages.open(this.t, field)) ?? new FieldPages(this.t, field, { next: 0, pages: [] });
      this.open.set(field, pages);
    }
    return pages;
  }

  /** Record `id` went from `before` to `after` (bodies; undefined: absent). */
  async move(id: string, before: string | undefined, after: string | undefined): Promise<void> {
    if (this.empty || (before === undefined && after === undefined)) return;
    const old = before === undefined ? null : JSON.parse(before);
    const now = after === undefined ? null : JSON.parse(after);
    for (const field of this.fields) {
      const pages = await this.field(field);
      if (old !== null) await pages.remove(fieldValue(old, field), id);
      if (now !== null) await pages.insert(fieldValue(now, field), id, after!);
    }
  }

  /** A full body: every index rebuilt from `records`. */
  async replaceAll(records: [string, string][]): Promise<void> {
    if (this.empty) return;
    const parsed = parse(records);
    for (const field of this.fields) FieldPages.build(this.t, field, parsed, await this.t.get<Directory>(TABLE, field));
    this.open.clear();
  }

  /** Indexes `field` of `records` (every server record), when it is not yet. */
  async create(field: string, records: () => Promise<[string, string][]>): Promise<void> {
    if (this.fields.includes(field)) return;
    FieldPages.build(this.t, field, parse(await records()), await this.t.get<Directory>(TABLE, field));
    this.fields.push(field);
    this.t.put("meta", this.fields, LIST);
  }

  /** Forgets the index on `field`. */
  async drop(field: string): Promise<void> {
    if (!this.fields.includes(field)) return;
    const dir = await this.t.get<Directory>(TABLE, field);
    for (const ref of dir?.pages ?? []) this.t.delete(TABLE, `${field}#${ref.key}`);
    this.t.delete(TABLE, field);
    this.fields.splice(this.fields.indexOf(field), 1);
    this.t.put("meta", this.fields, LIST);
  }

  /** The server records (id, body) the index on `field` selects for `filter`, or null when `field` is not indexed here. */
  async select(field: string, filter: QueryFilter | null, scan: IndexScan): Promise<[string, string][] | null> {
    if (!this.fields.includes(field)) return null;
    return (await this.field(field)).select(filter, scan);
  }

  flush(): void {
    for (const pages of this.open.values()) pages.flush();
  }
}

function parse(records: [string, string][]): [string, string, Record<string, unknown>][] {
  return records.map(([id, body]) => [id, body, JSON.parse(body)]);
}
