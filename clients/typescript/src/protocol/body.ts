import { BodyError, DeltaSnapError } from "./errors.js";
import { scanCanonicalRecord } from "./canonical-scan.js";
import { canonicalString, compareUTF8, JsonNumber, JsonObject, JsonReader, JsonValue, parseJSON } from "./json.js";

/** One entry of a body's `records`: a visible record's canonical text, or a tombstone. */
export interface BodyRecord {
  id: string;
  /** Canonical text (§2) of the visible record; `null` for a tombstone (hidden). */
  canonical: string | null;
}

/** A parsed protocol body (PROTOCOL.md §4): a full body, a delta, or a snapshot file's content. */
export interface Body {
  collection: string;
  kind: "full" | "delta";
  /** The token a delta applies on; absent in a full body. */
  base?: string;
  token: string;
  lastModified: string;
  /** The state checksum of the whole state at `token` (16 hex digits). */
  checksum: string;
  count: number;
  records: BodyRecord[];
}

/**
 * Reads a body and checks everything that can be checked without the local state: format 1,
 * the collection, the member types, `count`, a full body's order and absence of tombstones,
 * a delta's ids each at most once. Throws `BodyError`.
 *
 * ```ts
 * const body = parseBody(await response.text(), "countries");
 * body.kind   // "delta"
 * ```
 */
export function parseBody(text: string, collection: string): Body {
  let document: JsonObject;
  let list: BodyRecord[];
  try {
    ({ document, records: list } = readDocument(text));
  } catch (error) {
    if (error instanceof BodyError) throw error;
    throw new BodyError("unreadable_body", `the body is not valid JSON (${(error as Error).message})`);
  }
  const format = document.get("format");
  if (!(format instanceof JsonNumber) || format.literal !== "1") throw new BodyError("wrong_format", `unsupported body format ${describe(format)}; this client reads format 1`);
  const name = requireString(document, "collection");
  if (name !== collection) throw new BodyError("wrong_collection", `the body is for collection "${name}", not "${collection}"`);
  const kind = requireString(document, "kind");
  if (kind !== "full" && kind !== "delta") throw new BodyError("wrong_format", `unknown body kind "${kind}"`);
  const token = requireString(document, "token");
  const lastModified = requireString(document, "lastModified");
  const checksum = requireString(document, "checksum");
  if (!/^[0-9a-f]{16}$/.test(checksum)) throw new BodyError("wrong_format", `the checksum "${checksum}" is not 16 lowercase hex digits`);
  const base = kind === "delta" ? requireString(document, "base") : undefined;
  const countValue = document.get("count");
  if (!(countValue instanceof JsonNumber) || !/^(0|[1-9][0-9]*)$/.test(countValue.literal)) throw new BodyError("wrong_format", "the body has no valid count");
  const count = Number(countValue.literal);
  if (list.length !== count) throw new BodyError("count_mismatch", `the body announces ${count} records but holds ${list.length}`);
  const records = list;
  if (kind === "full") {
    for (let i = 0; i < records.length; i++) {
      if (records[i].canonical === null) throw new BodyError("wrong_format", `a full body holds the tombstone "${records[i].id}"`);
      if (i > 0 && compareUTF8(records[i - 1].id, records[i].id) >= 0) throw new BodyError("wrong_format", `a full body's records are not sorted by id at "${records[i].id}"`);
    }
  } else {
    const seen = new Set<string>();
    for (const r of records) {
      if (seen.has(r.id)) throw new BodyError("wrong_format", `the delta holds record "${r.id}" twice`);
      seen.add(r.id);
    }
  }
  return { collection: name, kind, base, token, lastModified, checksum, count, records };
}

/**
 * Reads the body object member by member; `records` element by element, taking a record's
 * text as it is when it is already canonical (the common case: the server writes them so)
 * and parsing it fully otherwise. Member order and layout do not matter.
 */
function readDocument(text: string): { document: JsonObject; records: BodyRecord[] } {
  const reader = new JsonReader(text);
  const document: JsonObject = new Map();
  let records: BodyRecord[] | null = null;
  reader.expect("{");
  if (!reader.accept("}")) {
    for (;;) {
      reader.skipWhitespace();
      if (text.charCodeAt(reader.pos) !== 0x22) reader.fail("expected a member name");
      const key = reader.readString();
      if (document.has(key) || (key === "records" && records)) reader.fail(`duplicate member "${key}"`);
      reader.expect(":");
      if (key === "records") records = readRecords(reader);
      else document.set(key, reader.readValue(1));
      if (reader.accept(",")) continue;
      reader.expect("}");
      break;
    }
  }
  reader.skipWhitespace();
  if (reader.pos !== text.length) reader.fail("unexpected text after the body");
  if (!records) throw new BodyError("wrong_format", "the body has no records array");
  return { document, records };
}

function readRecords(reader: JsonReader): BodyRecord[] {
  const text = reader.text;
  const records: BodyRecord[] = [];
  reader.skipWhitespace();
  if (text.charCodeAt(reader.pos) !== 0x5b) throw new BodyError("wrong_format", "the body has no records array");
  reader.pos++;
  if (reader.accept("]")) return records;
  for (;;) {
    reader.skipWhitespace();
    const fast = scanCanonicalRecord(text, reader.pos);
    if (fast) {
      records.push({ id: fast.id, canonical: text.slice(reader.pos, fast.end) });
      reader.pos = fast.end;
    } else {
      records.push(readRecord(reader.readValue(2)));
    }
    if (reader.accept(",")) continue;
    reader.expect("]");
    return records;
  }
}

/** A record value as §2 makes it canonical: `hidden:false` dropped, `hidden:true` a tombstone. */
export function readRecord(value: JsonValue): BodyRecord {
  if (!(value instanceof Map)) throw new BodyError("wrong_format", "a record is not a JSON object");
  const id = value.get("id");
  if (typeof id !== "string" || id.length === 0 || id.includes("\0")) throw new BodyError("wrong_format", "a record has no valid id");
  const hidden = value.get("hidden");
  if (hidden === true) return { id, canonical: null };
  if (hidden !== undefined && hidden !== false) throw new BodyError("wrong_format", `record "${id}" has a hidden member that is not a boolean`);
  if (hidden === false) value.delete("hidden");
  return { id, canonical: canonicalString(value) };
}

function requireString(object: JsonObject, key: string): string {
  const value = object.get(key);
  if (typeof value !== "string") throw new BodyError("wrong_format", `the body has no string "${key}"`);
  return value;
}

function describe(value: JsonValue | undefined): string {
  if (value === undefined) return "(missing)";
  return canonicalString(value);
}

/** Whether an error means "this body cannot be applied" (the fallback ladder's trigger). */
export function isBodyProblem(error: unknown): boolean {
  return error instanceof BodyError || (error instanceof DeltaSnapError && error.code === "invalid_json");
}

/** A record's canonical text from JSON text (§2, rule 6 included: `hidden:false` dropped, `hidden:true` a tombstone). */
export function canonicalRecord(text: string): string {
  const r = readRecord(parseJSON(text));
  return r.canonical ?? `{"hidden":true,"id":${canonicalString(r.id)}}`;
}
