import { AttachmentReference, referencesIn } from "../protocol/attachment.js";
import { RecordPages } from "./record-pages.js";
import type { Tables } from "./store.js";

/**
 * The file references of a replica, kept in the `refs` table as the rows holding them are
 * written — in the same transaction — so that no sync step finds them by reading every
 * record: a one-record delta costs the same on a million records as on a hundred.
 *
 * Rows of `refs`:
 * - `r:<id>` / `o:<id>`: the hashes a server record / a local value (overlay) refers to
 *   (absent when it refers to none: the usual case costs one read);
 * - `h:<sha256>`: `{ reference, holders }`, how many such rows refer to it.
 *
 * A hash is referenced while it has holders (a server record whose local value dropped the
 * file keeps it until the pull that settles the write: a file is never let go too early).
 * `meta` row `fileChanges` maps each hash whose holders went to or from zero to a change
 * number: what the next sync downloads or lets go of, in O(changes). `meta` row `refsBuilt`
 * says the table was built (a database from before it is indexed once, from its rows, and
 * each file it refers to noted as a change: the next sync fetches what is missing).
 */
export class FileRefs {
  private changes: Record<string, number> | null = null;

  private constructor(private readonly t: Tables) {}

  /** The references of this transaction, built first when the database predates them (O(records), once). */
  static async open(t: Tables): Promise<FileRefs> {
    const refs = new FileRefs(t);
    if (!(await t.get<boolean>("meta", "refsBuilt"))) {
      for (const [id, body] of await RecordPages.all(t)) await refs.set("r", id, body);
      const ids = await t.getAllKeys("overlay");
      const overlay = await t.getAll<{ body: string | null }>("overlay");
      for (let i = 0; i < ids.length; i++) await refs.set("o", ids[i] as string, overlay[i].body);
      t.put("meta", true, "refsBuilt");
    }
    return refs;
  }

  /**
   * Replaces the references of row `id` (`r`: server record, `o`: local value) by those
   * `body` makes (null: the row is gone). One read when neither refers to a file.
   */
  async set(kind: "r" | "o", id: string, body: string | null): Promise<void> {
    const key = `${kind}:${id}`;
    const old = (await this.t.get<string[]>("refs", key)) ?? [];
    let references: AttachmentReference[] = [];
    if (body !== null && body.includes('"$attachment"')) {
      try { references = referencesIn(body); } catch { /* malformed: plain data, as the server refuses it */ }
    }
    if (old.length === 0 && references.length === 0) return;
    const next = references.map((r) => r.sha256);
    for (const sha256 of old) if (!next.includes(sha256)) await this.hold(sha256, null, -1);
    for (const r of references) if (!old.includes(r.sha256)) await this.hold(r.sha256, r, +1);
    if (next.length) this.t.put("refs", next, key);
    else this.t.delete("refs", key);
  }

  /** Forgets the references of every server record (a full body replaces them all): O(references). */
  async clearRecords(): Promise<void> {
    for (const key of await this.t.getAllKeys("refs")) {
      if (typeof key === "string" && key.startsWith("r:")) await this.set("r", key.slice(2), null);
    }
  }

  private async hold(sha256: string, reference: AttachmentReference | null, delta: number): Promise<void> {
    const key = `h:${sha256}`;
    const held = await this.t.get<{ reference: AttachmentReference; holders: number }>("refs", key);
    const holders = (held?.holders ?? 0) + delta;
    if (holders > 0) this.t.put("refs", { reference: held?.reference ?? reference, holders }, key);
    else this.t.delete("refs", key);
    if (holders === 0 || (holders === 1 && delta > 0)) {
      this.changes ??= (await this.t.get<Record<string, number>>("meta", "fileChanges")) ?? {};
      this.changes[sha256] = (this.changes[sha256] ?? 0) + 1;
    }
  }

  /** Writes the changes noted (call once, at the end of the transaction). */
  flush(): void {
    if (this.changes) this.t.put("meta", this.changes, "fileChanges");
  }

  // MARK: - Reading

  /** The reference made to `sha256`, or null when nothing refers to it: one read. */
  static async reference(t: Tables, sha256: string): Promise<AttachmentReference | null> {
    return (await t.get<{ reference: AttachmentReference }>("refs", `h:${sha256}`))?.reference ?? null;
  }

  /** Every referenced file: O(references), never O(records). */
  static async all(t: Tables): Promise<Map<string, AttachmentReference>> {
    const keys = await t.getAllKeys("refs");
    const rows = await t.getAll<unknown>("refs");
    const found = new Map<string, AttachmentReference>();
    keys.forEach((key, i) => {
      if (typeof key === "string" && key.startsWith("h:")) found.set(key.slice(2), (rows[i] as { reference: AttachmentReference }).reference);
    });
    return found;
  }
}
