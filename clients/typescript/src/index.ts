/**
 * DeltaSnap's browser client, the app API (`import … from "deltasnap"`): a verified,
 * offline-first replica of one collection (`DeltaSnapReplica`), a user's whole view of
 * partitions (`DeltaSnapView`), and where they are kept (`indexedDBStorage`, the default,
 * or a `MemoryStorage`; any `ReplicaStore`). The wire-level building blocks are in
 * `deltasnap/protocol`. Zero runtime dependencies.
 *
 * ```ts
 * import { DeltaSnapReplica } from "deltasnap";
 * const countries = await DeltaSnapReplica.open({ collection: "countries", bundledSnapshot: "countries.snapshot" });
 * const all = await countries.all();
 * ```
 */
export { DeltaSnapReplica, collectionPath } from "./runtime/replica.js";
export type { AttachmentRef, JsonRecord, ReplicaOptions, ReplicaStatus, StorageLoss, SyncResult } from "./runtime/replica.js";
export type { AttachmentPolicy, AttachmentProgress, AttachmentReport, AttachmentStatus } from "./runtime/attachments.js";
export { attachmentReportLine } from "./runtime/attachments.js";
export { AttachmentFiles, openAttachmentFiles } from "./runtime/attachment-files.js";
export type { AttachmentEntry, FileBytes, FileLedger, FileWriter } from "./runtime/attachment-files.js";
export { LiveQuery, ReplicaQuery } from "./runtime/query.js";
export type { Comparison, QueryFilter, QueryOrder, QueryValue } from "./runtime/query.js";
export { DeltaSnapView, jwtSubject } from "./runtime/view.js";
export type { ViewOptions, ViewSyncReport } from "./runtime/view.js";
export type { LiveOptions } from "./runtime/live.js";
export type { PullOutcome, PushReport, RefusedWrite, SyncPhase, WaitPolicy } from "./runtime/sync-engine.js";
export type { RetryPolicy } from "./protocol/retry.js";
export { AttachmentError, BodyError, BundleError, DeltaSnapError, JSONParseError, StorageError, TrustError, WriteRefusedError } from "./protocol/errors.js";
// Where replicas are kept: the IndexedDB storage (the default), the in-memory one, and the
// interfaces a storage of the app's own implements. The building blocks of a storage backend
// (`TableStore`, `MemoryStore`, `IndexedDBStore`…) are in `deltasnap/internal`.
export type { MarkerStore, PendingWrite, ReplicaStorage, ReplicaStore } from "./runtime/store.js";
export { indexedDBStorage } from "./runtime/indexeddb-store.js";
export { MemoryStorage } from "./runtime/memory-store.js";
export type { Mutation, Operation } from "./protocol/merge.js";
