/**
 * DeltaSnap's browser client: a verified, offline-first replica of one collection in
 * IndexedDB (docs/PROTOCOL.md), and a user's whole view of partitions (`DeltaSnapView`).
 * Zero runtime dependencies.
 *
 * ```ts
 * import { DeltaSnapReplica } from "./deltasnap.js";
 * const countries = await DeltaSnapReplica.open({ collection: "countries", bundledSnapshot: "countries.snapshot" });
 * const all = await countries.all();
 * ```
 */
export { DeltaSnapReplica, collectionPath } from "./replica.js";
export { DeltaSnapView, jwtSubject } from "./view.js";
export type { ViewOptions, ViewSyncReport } from "./view.js";
export { LiveLoop } from "./live.js";
export type { LiveOptions, LiveStep } from "./live.js";
export type { JsonRecord, ReplicaOptions, ReplicaStatus, StorageLoss, SyncResult } from "./replica.js";
export type { PullOutcome, PushReport, RefusedWrite, SyncPhase, WaitPolicy } from "./sync-engine.js";
export type { PendingWrite } from "./store.js";
export { BodyError, BundleError, DeltaSnapError, JSONParseError, StorageError, TrustError, WriteRefusedError } from "./errors.js";
// The protocol's building blocks, for tools and tests.
export { canonicalize, canonicalString, parseJSON, JsonNumber } from "./json.js";
export type { JsonValue } from "./json.js";
export { xxh64 } from "./xxh64.js";
export { StateChecksum } from "./checksum.js";
export { StateDigest } from "./lthash.js";
export { parseBody } from "./body.js";
export type { Body, BodyRecord } from "./body.js";
export { parseSignedIndex, verifySignedIndex, TrustedKey } from "./signed-index.js";
export { applyStrict, applyLenient } from "./merge.js";
export type { Mutation, Operation } from "./merge.js";
