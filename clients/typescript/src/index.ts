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
export { DeltaSnapView, jwtSubject } from "./runtime/view.js";
export type { ViewOptions, ViewSyncReport } from "./runtime/view.js";
export { LiveLoop } from "./runtime/live.js";
export type { LiveOptions, LiveStep } from "./runtime/live.js";
export type { PullOutcome, PushReport, RefusedWrite, SyncPhase, WaitPolicy } from "./runtime/sync-engine.js";
export type { RetryPolicy } from "./protocol/retry.js";
export { AttachmentError, BodyError, BundleError, DeltaSnapError, JSONParseError, StorageError, TrustError, WriteRefusedError } from "./protocol/errors.js";
// Storage: the interface the sync engine uses, the IndexedDB store and the in-memory one.
export { EMPTY_STATE, StateMovedError, TableStore, TABLES, newClientId } from "./runtime/store.js";
export type {
  MarkerStore, PendingWrite, PreparedApply, QueueState, ReplicaState, ReplicaStorage, ReplicaStore, TableKey, TableName, Tables,
} from "./runtime/store.js";
export { IndexedDBStore, indexedDBStorage } from "./runtime/indexeddb-store.js";
export { MemoryDatabase, MemoryStorage, MemoryStore } from "./runtime/memory-store.js";
export type { Mutation, Operation } from "./protocol/merge.js";
