import { TrustError } from "./errors.js";
import { canonicalString, JsonNumber, JsonObject, JsonValue, parseJSON, utf8 } from "./json.js";
import { fromBase64, sha256, subtle, toHex } from "./webcrypto.js";

/** Seconds an expired index is still accepted, for clock skew (PROTOCOL.md §8.4). */
export const ALLOWED_CLOCK_SKEW = 300;

/**
 * An Ed25519 public key the app pins, from the `signing.pub` line `deltasnap keygen` writes.
 *
 * ```ts
 * const key = await TrustedKey.parse("ed25519-public:7OiGtfiLKsEo…");
 * key.id   // "8a6c3e5a0507b3dd"
 * ```
 */
export class TrustedKey {
  private constructor(readonly id: string, readonly raw: Uint8Array, private readonly key: CryptoKey) {}

  static async parse(line: string): Promise<TrustedKey> {
    const text = line.trim();
    const prefix = "ed25519-public:";
    if (!text.startsWith(prefix)) throw new TrustError("bad_key", `a trusted key is the line "ed25519-public:<base64>" from signing.pub, not ${JSON.stringify(text.slice(0, 40))}`);
    let raw: Uint8Array;
    try { raw = fromBase64(text.slice(prefix.length)); } catch { raw = new Uint8Array(); }
    if (raw.length !== 32) throw new TrustError("bad_key", "a trusted key must be 32 bytes of base64 after 'ed25519-public:'");
    const id = toHex(await sha256(raw)).slice(0, 16);
    let key: CryptoKey;
    try {
      key = await subtle().importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
    } catch (error) {
      throw new TrustError("no_webcrypto", `this browser's WebCrypto has no Ed25519 (${(error as Error).message}); signed data cannot be verified here`);
    }
    return new TrustedKey(id, raw, key);
  }

  async verify(signature: Uint8Array, message: Uint8Array): Promise<boolean> {
    try {
      return await subtle().verify({ name: "Ed25519" }, this.key, signature, message);
    } catch {
      return false;
    }
  }
}

/** One collection's entry in the index: the signed state the client may commit. */
export interface IndexEntry {
  token: string;
  version: bigint;
  count: number;
  floor: bigint;
  /** Fingerprint of the state digest (§8.2), 64 hex digits. */
  digest: string;
  lastModified: string;
}

/** A parsed `/v1/index` document (or a baked `NAME.index`), not yet verified. */
export interface SignedIndex {
  sequence: bigint;
  issued: bigint;
  expires: bigint;
  entries: Map<string, IndexEntry>;
  signatures: { key: string; signature: Uint8Array }[];
  /** A user's view (§10.3): the `sub` it is for; null for the public index. */
  subject: string | null;
  /** "deltasnap-index-v1\n" + the canonical bytes of `index` (re-serialised, §8.1). */
  signedMessage: Uint8Array;
}

/** Parses an index document. Throws `TrustError("bad_index")`. */
export function parseSignedIndex(text: string): SignedIndex {
  let document: JsonValue;
  try { document = parseJSON(text); } catch (error) { throw bad(`not JSON: ${(error as Error).message}`); }
  if (!(document instanceof Map)) throw bad("not a JSON object");
  const index = document.get("index");
  if (!(index instanceof Map)) throw bad("no index object");
  if (integer(index, "format") !== 1n) throw bad("format is not 1");
  const collections = index.get("collections");
  if (!(collections instanceof Map)) throw bad("no collections object");
  const entries = new Map<string, IndexEntry>();
  for (const [name, value] of collections) {
    if (!(value instanceof Map)) throw bad(`entry "${name}" is not an object`);
    entries.set(name, {
      token: string(value, "token"), version: integer(value, "version"), count: Number(integer(value, "count")),
      floor: integer(value, "floor"), digest: string(value, "digest"), lastModified: string(value, "lastModified"),
    });
  }
  const list = document.get("signatures");
  if (!Array.isArray(list)) throw bad("no signatures array");
  const signatures = list.map((s) => {
    if (!(s instanceof Map)) throw bad("a signature is not an object");
    let signature: Uint8Array;
    try { signature = fromBase64(string(s, "signature")); } catch (error) { if (error instanceof TrustError) throw error; throw bad("a signature is not base64"); }
    if (signature.length !== 64) throw bad("a signature is not 64 bytes");
    return { key: string(s, "key"), signature };
  });
  const subject = index.get("subject");
  if (subject !== undefined && typeof subject !== "string") throw bad(`"subject" is not a string`);
  return {
    sequence: integer(index, "sequence"), issued: integer(index, "issued"), expires: integer(index, "expires"),
    entries, signatures, subject: subject ?? null, signedMessage: utf8("deltasnap-index-v1\n" + canonicalString(index)),
  };
}

/**
 * Checks an index as §8.4 step 1 says: at least one signature by a trusted key, every
 * signature by a trusted key valid, not expired (`now` in seconds; `null` skips it, for a
 * bundled index), its sequence not below the one held. Throws `TrustError`.
 */
export async function verifySignedIndex(index: SignedIndex, trusted: TrustedKey[], now: number | null, heldSequence: bigint | null): Promise<void> {
  const byId = new Map(trusted.map((k) => [k.id, k]));
  const ours = index.signatures.filter((s) => byId.has(s.key));
  if (ours.length === 0) throw new TrustError("untrusted", `the index is signed by no trusted key (signers: ${index.signatures.map((s) => s.key).join(", ") || "none"})`);
  for (const s of ours) {
    if (!(await byId.get(s.key)!.verify(s.signature, index.signedMessage))) throw new TrustError("bad_signature", `the signature of key ${s.key} does not verify: the index was altered or forged`);
  }
  if (now !== null && Number(index.expires) + ALLOWED_CLOCK_SKEW < now) throw new TrustError("expired", `the index expired at ${new Date(Number(index.expires) * 1000).toISOString()}`);
  if (heldSequence !== null && index.sequence < heldSequence) throw new TrustError("replayed", `the index's sequence ${index.sequence} is below the ${heldSequence} already verified (an old copy replayed)`);
}

function bad(message: string): TrustError {
  return new TrustError("bad_index", `the signed index is unreadable: ${message}`);
}

function string(object: JsonObject, key: string): string {
  const v = object.get(key);
  if (typeof v !== "string") throw bad(`"${key}" is not a string`);
  return v;
}

function integer(object: JsonObject, key: string): bigint {
  const v = object.get(key);
  if (!(v instanceof JsonNumber) || !/^(0|[1-9][0-9]*)$/.test(v.literal)) throw bad(`"${key}" is not a non-negative integer`);
  return BigInt(v.literal);
}
