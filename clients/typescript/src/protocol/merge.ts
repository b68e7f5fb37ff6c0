import { WriteRefusedError } from "./errors.js";
import { canonicalString, JsonObject, parseJSON } from "./json.js";

export type Operation = "put" | "patch" | "insert" | "delete";

/** A write as queued and pushed (PROTOCOL.md §5.5): `value` is canonical JSON text. */
export interface Mutation {
  op: Operation;
  id: string;
  /** put/insert: the record; patch: the fields (null removes one); delete: null. */
  value: string | null;
}

/**
 * The server's merge rule (PROTOCOL.md §5.6) applied to a local value: returns the new
 * record's canonical text, or `null` when the write leaves the record absent. Throws
 * `WriteRefusedError` with the server's refusal code when the server would refuse it, so
 * a write that can never be accepted is refused before it is queued (§6 step 5).
 *
 * ```ts
 * applyStrict({ op: "patch", id: "AD", value: '{"capital":"Andorra la Vella"}' }, '{"id":"AD","name":"Andorra"}')
 * // '{"capital":"Andorra la Vella","id":"AD","name":"Andorra"}'
 * ```
 */
export function applyStrict(write: Mutation, current: string | null): string | null {
  validate(write);
  switch (write.op) {
    case "delete":
      return null;
    case "insert":
      if (current !== null) throw new WriteRefusedError("exists", `record "${write.id}" already exists; an insert never replaces a record`, write.id);
      return withId(object(write.value!), write.id);
    case "put":
      return withId(object(write.value!), write.id);
    case "patch":
      if (current === null) throw new WriteRefusedError("not_found", `record "${write.id}" does not exist, so it cannot be patched`, write.id);
      return patch(current, write.value!, write.id);
  }
}

/**
 * The lenient replay the overlay uses (§6 step 5): an insert acts as a put, a patch of an
 * absent record is skipped; the server's answer settles what really happens.
 */
export function applyLenient(write: Mutation, current: string | null): string | null {
  try {
    if (write.op === "insert") return applyStrict({ ...write, op: "put" }, current);
    if (write.op === "patch" && current === null) return null;
    return applyStrict(write, current);
  } catch {
    return current;
  }
}

/** Checks the value the way the server does before merging (refusal codes of §5.6). */
export function validate(write: Mutation): void {
  if (typeof write.id !== "string" || write.id.length === 0) throw new WriteRefusedError("invalid_mutation", "a write needs a non-empty string id", String(write.id));
  if (write.id.includes("\0")) throw new WriteRefusedError("invalid_record", "a record id cannot contain U+0000", write.id);
  if (!["put", "patch", "insert", "delete"].includes(write.op)) throw new WriteRefusedError("invalid_mutation", `unknown operation "${write.op}"`, write.id);
  if (write.op === "delete") return;
  const value = write.value === null ? null : parseJSON(write.value);
  if (!(value instanceof Map)) throw new WriteRefusedError("invalid_record", `the value of a ${write.op} must be a JSON object`, write.id);
  if (value.has("hidden")) throw new WriteRefusedError("reserved_field", `"hidden" is reserved: use delete to hide record "${write.id}"`, write.id);
  const id = value.get("id");
  if (id !== undefined && id !== write.id) throw new WriteRefusedError("id_mismatch", `the value's id ${JSON.stringify(id)} differs from the write's id "${write.id}"`, write.id);
}

function object(text: string): JsonObject {
  return parseJSON(text) as JsonObject;
}

function withId(record: JsonObject, id: string): string {
  record.set("id", id);
  return canonicalString(record);
}

/** Top-level JSON merge (RFC 7396 at the top level only): null removes, objects replace whole. */
function patch(current: string, fields: string, id: string): string {
  const record = object(current);
  for (const [key, value] of object(fields)) {
    if (value === null) record.delete(key);
    else record.set(key, value);
  }
  return withId(record, id);
}
