import type { Tables } from "./store.js";

/**
 * The verified server records, stored in pages of a few hundred records rather than one
 * IndexedDB row each: Chromium spends ~50–100 µs per `put`, so a 100,000-record full body
 * written row by row takes seconds, and as ~400 pages a fraction of that.
 *
 * A page is `{ ids, bodies }` sorted by id, stored under its first id; page *i* holds the
 * ids from its key up to the next page's key. Ids compare as IndexedDB compares string keys
 * (UTF-16 code units), so the routing agrees with the key order of the store.
 *
 * A `RecordPages` works inside one transaction (any backend's {@link Tables}): it routes with the keys read at `open`,
 * caches the pages it touches, and `flush()` writes the changed ones back (re-keyed when
 * their first id changed, split when they grew past `MAX_PAGE`, deleted when empty).
 */
export interface Page {
  ids: string[];
  bodies: string[];
}

export const PAGE_SIZE = 256;
const MAX_PAGE = 2 * PAGE_SIZE;
const STORE = "pages";

/** Index of `id` in sorted `ids`, or where it would go (`found` false). */
function locate(ids: string[], id: string): { index: number; found: boolean } {
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ids[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  return { index: lo, found: ids[lo] === id };
}

export class RecordPages {
  private keys: string[] = [];
  private readonly cache = new Map<number, Page>();
  private readonly dirty = new Set<number>();

  private constructor(private readonly tables: Tables) {}

  static async open(tables: Tables): Promise<RecordPages> {
    const pages = new RecordPages(tables);
    pages.keys = (await tables.getAllKeys(STORE)) as string[];
    return pages;
  }

  /** Replaces every record (a full body) by `records`, in id order or not. */
  static replaceAll(tables: Tables, records: [string, string][]): void {
    tables.clear(STORE);
    let sorted = records;
    for (let i = 1; i < records.length; i++) {
      // A full body is sorted by UTF-8 bytes; IndexedDB orders by UTF-16 code units. They
      // differ only around astral characters, so this sort rarely runs.
      if (!(records[i - 1][0] < records[i][0])) {
        sorted = [...records].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
        break;
      }
    }
    for (let i = 0; i < sorted.length; i += PAGE_SIZE) {
      const slice = sorted.slice(i, i + PAGE_SIZE);
      tables.put(STORE, { ids: slice.map((r) => r[0]), bodies: slice.map((r) => r[1]) } as Page, slice[0][0]);
    }
  }

  /** Every record, in id order. */
  static async all(tables: Tables): Promise<[string, string][]> {
    const pages = await tables.getAll<Page>(STORE);
    const out: [string, string][] = [];
    for (const page of pages) for (let i = 0; i < page.ids.length; i++) out.push([page.ids[i], page.bodies[i]]);
    return out;
  }

  /** The page that holds (or would hold) `id`: -1 when there is no page yet. */
  private route(id: string): number {
    if (this.keys.length === 0) return -1;
    let lo = 0;
    let hi = this.keys.length - 1;
    let answer = 0;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (this.keys[mid] <= id) { answer = mid; lo = mid + 1; } else hi = mid - 1;
    }
    return answer;
  }

  private async page(index: number): Promise<Page> {
    let page = this.cache.get(index);
    if (!page) {
      page = index === -1 ? { ids: [], bodies: [] } : (await this.tables.get<Page>(STORE, this.keys[index]))!;
      this.cache.set(index, page);
    }
    return page;
  }

  async get(id: string): Promise<string | undefined> {
    const index = this.route(id);
    if (index === -1 && !this.cache.has(-1)) return undefined;
    const page = await this.page(index);
    const { index: at, found } = locate(page.ids, id);
    return found ? page.bodies[at] : undefined;
  }

  async set(id: string, body: string): Promise<void> {
    const index = this.route(id);
    const page = await this.page(index);
    const { index: at, found } = locate(page.ids, id);
    if (found) page.bodies[at] = body;
    else {
      page.ids.splice(at, 0, id);
      page.bodies.splice(at, 0, body);
    }
    this.dirty.add(index);
  }

  async delete(id: string): Promise<void> {
    const index = this.route(id);
    if (index === -1 && !this.cache.has(-1)) return;
    const page = await this.page(index);
    const { index: at, found } = locate(page.ids, id);
    if (!found) return;
    page.ids.splice(at, 1);
    page.bodies.splice(at, 1);
    this.dirty.add(index);
  }

  /** Writes the changed pages back (deletes of old keys first, so a re-keyed page is never lost). */
  flush(): void {
    const puts: [string, Page][] = [];
    for (const index of this.dirty) {
      const page = this.cache.get(index)!;
      const original = index === -1 ? null : this.keys[index];
      const chunks: Page[] = [];
      if (page.ids.length > MAX_PAGE) {
        for (let i = 0; i < page.ids.length; i += PAGE_SIZE) chunks.push({ ids: page.ids.slice(i, i + PAGE_SIZE), bodies: page.bodies.slice(i, i + PAGE_SIZE) });
      } else if (page.ids.length > 0) chunks.push(page);
      if (original !== null && (chunks.length !== 1 || chunks[0].ids[0] !== original)) this.tables.delete(STORE, original);
      for (const chunk of chunks) puts.push([chunk.ids[0], chunk]);
    }
    for (const [key, page] of puts) this.tables.put(STORE, page, key);
    this.dirty.clear();
  }
}
