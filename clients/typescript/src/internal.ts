/**
 * DeltaSnap's browser client, its inner parts (`import … from "deltasnap/internal"`): the
 * storage building blocks (`TableStore` over four tables, with its IndexedDB and in-memory
 * backends), the sync engine's steps, the record pages and live mode's loop. For the
 * package's own tests and for a storage backend of your own (extend `TableStore` and supply
 * transactions); an app needs only `deltasnap`. Not covered by the package's version: these
 * change with the client.
 *
 * ```ts
 * import { MemoryStore, pull } from "deltasnap/internal";
 * const store = new MemoryStore("countries");
 * ```
 */
export { EMPTY_STATE, StateMovedError, TableStore, TABLES, newClientId } from "./runtime/store.js";
export type { PreparedApply, QueueState, ReplicaState, TableKey, TableName, Tables } from "./runtime/store.js";
export { IndexedDBStore } from "./runtime/indexeddb-store.js";
export { MemoryDatabase, MemoryStore } from "./runtime/memory-store.js";
export { RecordPages, PAGE_SIZE } from "./runtime/record-pages.js";
export type { Page } from "./runtime/record-pages.js";
export { gunzip, loadBundledSnapshot } from "./runtime/bundle.js";
export { LiveLoop } from "./runtime/live.js";
export type { LiveStep } from "./runtime/live.js";
export { fetchTextWithTimeout, fetchWithTimeout, pull, push, pushBody, requestInit, waitingUntil } from "./runtime/sync-engine.js";
export type { RequestParts, SyncContext } from "./runtime/sync-engine.js";
export { QueryEngine, compareSQL, fieldValue } from "./runtime/query.js";
export { StoredIndexes } from "./runtime/field-index.js";
export type { SQLValue } from "./runtime/query.js";
