import { DeltaSnapError } from "./errors.js";

/**
 * A record's reference to an attachment (PROTOCOL.md §12.1): an immutable file named by the
 * SHA-256 of its bytes. In a record it is the JSON object
 * `{"$attachment":"<sha256>","size":N,"type":"<media type>"}`, so the record's checksum, the
 * collection's digest and a signed index cover the hash.
 *
 * ```ts
 * const photo = await replica.attach(file, "image/jpeg");
 * await replica.put("n1", { title: "Beach", photo: referenceJSON(photo) });
 * ```
 */
export interface AttachmentReference {
  /** The SHA-256 of the bytes, 64 lowercase hexadecimal digits. */
  sha256: string;
  size: number;
  /** The media type, e.g. `image/jpeg`. */
  type: string;
}

const SHA256 = /^[0-9a-f]{64}$/;
// type/subtype with optional parameters, visible ASCII (and spaces in parameters), ≤ 255.
const MEDIA_TYPE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+\/[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*;\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+=("[\x20-\x7e]*"|[!-~]+))*$/;

/** Whether `text` is a SHA-256 as a reference names it (64 lowercase hex digits). */
export function isSHA256(text: string): boolean {
  return SHA256.test(text);
}

/** Whether `text` is a media type a reference may carry. */
export function isMediaType(text: string): boolean {
  return text.length <= 255 && MEDIA_TYPE.test(text);
}

/**
 * Reads `value` as a reference: the reference, `null` for plain data (no `$attachment`), or
 * throws `DeltaSnapError("invalid_attachment")` for an object with `$attachment` in any other
 * shape (a server refuses a write that carries one).
 */
export function parseReference(value: unknown): AttachmentReference | null {
  if (typeof value !== "object" || value === null || Array.isArray(value) || !("$attachment" in value)) return null;
  const o = value as Record<string, unknown>;
  const keys = Object.keys(o);
  const { $attachment: sha256, size, type } = o;
  if (keys.length !== 3 || typeof sha256 !== "string" || !isSHA256(sha256) || typeof size !== "number" || !Number.isSafeInteger(size) || size < 0
      || typeof type !== "string" || !isMediaType(type)) {
    throw new DeltaSnapError("invalid_attachment", `not an attachment reference (exactly "$attachment": 64 lowercase hex digits, "size": a whole number, "type": a media type): ${JSON.stringify(value).slice(0, 200)}`);
  }
  return { sha256, size, type };
}

/**
 * The references a record makes, each file once, in member order: each top-level member
 * whose value is a reference, and each reference among a top-level array's elements (deeper
 * objects are plain data, §12.1). `record` is the record's JSON text or the parsed object.
 * Throws like {@link parseReference}.
 */
export function referencesIn(record: string | Record<string, unknown>): AttachmentReference[] {
  if (typeof record === "string") {
    // Most records refer to nothing: skip the parse.
    if (!record.includes('"$attachment"')) return [];
    record = JSON.parse(record) as Record<string, unknown>;
  }
  const found = new Map<string, AttachmentReference>();
  for (const value of Object.values(record)) {
    for (const element of Array.isArray(value) ? value : [value]) {
      const reference = parseReference(element);
      if (reference && !found.has(reference.sha256)) found.set(reference.sha256, reference);
    }
  }
  return [...found.values()];
}

/** The reference as the plain object a record carries. */
export function referenceJSON(reference: AttachmentReference): { $attachment: string; size: number; type: string } {
  return { $attachment: reference.sha256, size: reference.size, type: reference.type };
}
