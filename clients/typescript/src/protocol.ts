/**
 * DeltaSnap's wire-level building blocks (`import … from "deltasnap/protocol"`), for tools,
 * tests and other clients: canonical JSON, XXH64 and the state checksum, the LtHash16 state
 * digest, body parsing, signed indexes (Ed25519 over WebCrypto), the merge rule and the
 * folding of offline writes, the fallback ladder and the backoff (docs/PROTOCOL.md). Pure
 * functions and values: no storage, no network, no timers. The app API is `deltasnap`.
 */
export { canonicalize, canonicalString, canonicalStringLiteral, compareUTF8, fromPlain, parseJSON, JsonNumber, JsonReader, utf8 } from "./protocol/json.js";
export type { JsonObject, JsonValue } from "./protocol/json.js";
export { scanCanonicalRecord } from "./protocol/canonical-scan.js";
export { xxh64, xxh64Halves } from "./protocol/xxh64.js";
export { StateChecksum, recordHash } from "./protocol/checksum.js";
export { StateDigest, recordLanes } from "./protocol/lthash.js";
export { chacha20Keystream } from "./protocol/chacha20.js";
export { canonicalRecord, isBodyProblem, parseBody, readRecord } from "./protocol/body.js";
export type { Body, BodyRecord } from "./protocol/body.js";
export { ALLOWED_CLOCK_SKEW, parseSignedIndex, verifySignedIndex, TrustedKey } from "./protocol/signed-index.js";
export type { IndexEntry, SignedIndex } from "./protocol/signed-index.js";
export { applyLenient, applyStrict, validate } from "./protocol/merge.js";
export type { Mutation, Operation } from "./protocol/merge.js";
export { fold } from "./protocol/fold.js";
export { decideAfterUnusableBody, decidePullAnswer, decidePushAnswer, isUnavailable } from "./protocol/ladder.js";
export type { PullDecision, PullStep, PushDecision } from "./protocol/ladder.js";
export { DEFAULT_RETRY_POLICY, retryDelay, serverDelay } from "./protocol/retry.js";
export type { RetryPolicy } from "./protocol/retry.js";
export { isMediaType, isSHA256, parseReference, referenceJSON, referencesIn } from "./protocol/attachment.js";
export type { AttachmentReference } from "./protocol/attachment.js";
export { HASH_IN_MEMORY_UP_TO, SHA256Stream, sha256OfBlob } from "./protocol/sha256.js";
export { AttachmentError, BodyError, BundleError, DeltaSnapError, JSONParseError, StorageError, TrustError, WriteRefusedError } from "./protocol/errors.js";
