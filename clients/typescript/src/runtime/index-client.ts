import { TrustError } from "../protocol/errors.js";
import { parseSignedIndex, SignedIndex, TrustedKey, verifySignedIndex } from "../protocol/signed-index.js";

/**
 * What an index from `GET /v1/index` must be before it is used (PROTOCOL.md §8.4 step 1,
 * §10.3 step 3): the one place the checks are written, each reader stating its policy.
 *
 * ```ts
 * const index = await readIndex(text, { trustedKeys: keys, now: nowSeconds, heldSequence: held, subject: "alice" });
 * ```
 */
export interface IndexPolicy {
  /** Keys one of which must sign it; empty: signatures are not checked (nor expiry or sequence). */
  trustedKeys: TrustedKey[];
  /** Seconds since 1970 it must not be expired at; null: not checked. */
  now: number | null;
  /** The `sequence` it must not be below; null: not checked. */
  heldSequence: bigint | null;
  /** A view's user: the index must be theirs (unsigned, the public index passes too). */
  subject?: string;
  /** A collection it must list. */
  collection?: string;
}

/** Parses `text` and applies `policy`; throws a `TrustError` for an index that fails a check. */
export async function readIndex(text: string, policy: IndexPolicy): Promise<SignedIndex> {
  const index = parseSignedIndex(text);
  if (policy.trustedKeys.length) await verifySignedIndex(index, policy.trustedKeys, policy.now, policy.heldSequence);
  if (policy.subject !== undefined && !(index.subject === policy.subject || (policy.trustedKeys.length === 0 && index.subject === null))) {
    throw new TrustError("other_subject", `the view is ${index.subject === null ? "the public index" : `"${index.subject}"'s`}, not "${policy.subject}"'s`);
  }
  if (policy.collection !== undefined && !index.entries.has(policy.collection)) {
    throw new TrustError("not_listed", `the signed index does not list "${policy.collection}" (is it private?)`);
  }
  return index;
}
