import { canonicalString, JsonObject, parseJSON } from "./json.js";
import { Mutation } from "./merge.js";

/**
 * Folds a new local write into the queued write before it on the same record (PROTOCOL.md
 * §6 step 5a), so a user who toggles a field five times offline sends one write, not five.
 * The same table as the Swift client's `WriteCoalescing`; only a write never sent may be
 * folded into (a sent one may have been processed under its number, and its retry must be
 * byte for byte the same write).
 *
 * | earlier | later | queued instead |
 * |---|---|---|
 * | patch | patch | one patch: the later fields over the earlier (a `null` stays, it removes) |
 * | put | patch | the put with the patch merged into its value |
 * | insert | patch | the insert with the patch merged in — while the server holds no such record |
 * | put / patch | put | the later put |
 * | put / patch / delete | delete | the delete |
 * | insert | delete | nothing, while the server holds no such record; else the delete |
 *
 * Returns the write that replaces `earlier` (it keeps `earlier`'s number and base), `"nothing"`
 * when no write is left to send, or `null` when the two must stay separate writes.
 *
 * ```ts
 * fold({ op: "patch", id: "p", value: '{"on":false}' }, { op: "patch", id: "p", value: '{"on":true}' }, true)
 * // { op: "patch", id: "p", value: '{"on":false}' }
 * ```
 */
export function fold(later: Mutation, earlier: Mutation, serverHasRecord: boolean): Mutation | "nothing" | null {
  if (later.id !== earlier.id) return null;
  const replaced = (op: Mutation["op"], value: string | null): Mutation => ({ op, id: earlier.id, value });
  switch (`${earlier.op}+${later.op}`) {
    case "patch+patch":
      return replaced("patch", merged(later.value, earlier.value, true));
    case "put+patch":
      return replaced("put", merged(later.value, earlier.value, false));
    case "insert+patch":
      // Someone else's record under this id will refuse the insert: the patch must stay apart.
      return serverHasRecord ? null : replaced("insert", merged(later.value, earlier.value, false));
    case "put+put":
    case "patch+put":
      return replaced("put", later.value);
    case "put+delete":
    case "patch+delete":
    case "delete+delete":
      return replaced("delete", null);
    case "insert+delete":
      return serverHasRecord ? replaced("delete", null) : "nothing";
    default:
      return null;
  }
}

/** `top`'s members set over `base`'s by the patch rule; a null removes unless kept (patch + patch). */
function merged(top: string | null, base: string | null, keepingNulls: boolean): string {
  const fields = parseJSON(top ?? "{}") as JsonObject;
  const members = parseJSON(base ?? "{}") as JsonObject;
  for (const [key, value] of fields) {
    if (value === null && !keepingNulls) members.delete(key);
    else members.set(key, value);
  }
  return canonicalString(members);
}
