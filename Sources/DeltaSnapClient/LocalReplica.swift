import DeltaSnapCore
import Foundation

/// Local-first writes and reads on a replica file, with no network and no collection URL:
/// what `deltasnap local` and `deltasnap pending` use. An app normally calls the same
/// methods on its ``DeltaSnapReplica``; both may share a file (SQLite serialises them).
///
/// ```swift
/// let local = try LocalReplica(path: "notes.sqlite")
/// try local.insert(id: "answer-41", json: #"{"question":41,"choice":"b"}"#)   // create-only
/// try local.patch(id: "n1", json: #"{"title":"Groceries","draft":null}"#)      // null removes
/// try local.delete(id: "n2")
/// for write in try local.pendingWrites() { print(write.seq, write.operation, write.id) }
/// ```
package final class LocalReplica {
    let storage: ReplicaStorage
    /// The replica's own copies of attachments.
    package let attachments: LocalAttachments

    /// The replica at `path`, created if missing. While the app still reads it in place from
    /// its bundled `.replica` (``BundledReplica/isReadInPlace(_:)``), the replica made here
    /// starts empty — the app adopts it, loads the bundle's rows into it and keeps its queued
    /// writes — but the checks of a write here see no data: pass the bundle
    /// (``init(path:bundledReplica:)``) where it is at hand.
    package init(path: String) throws {
        storage = try ReplicaStorage(path: path)
        attachments = LocalAttachments(replicaPath: path, scope: "")
    }

    /// One collection or partition (`sets/8271`) of a view's file (``DeltaSnapView``).
    package init(path: String, collection: String) throws {
        try CollectionPath.validate(collection)
        storage = try ReplicaStorage(path: path, scope: collection)
        attachments = LocalAttachments(replicaPath: path, scope: collection)
    }

    /// The replica at `path` — or, while it is still read from its bundled replica (no data
    /// change has copied it to `path` yet), that bundle: reads and the checks of a local
    /// write see the bundled records, and the first write copies the bundle to `path`.
    package init(path: String, bundledReplica: String) throws {
        storage = try ReplicaStorage.opening(path, bundledReplica: bundledReplica)
        attachments = LocalAttachments(replicaPath: path, scope: "")
    }

    /// Replaces record `id` by `json` (a JSON object; its `id`, if any, must be `id`).
    @discardableResult
    package func put(id: String, json: String) throws -> UInt64 { try storage.enqueue(.put, id: id, json: json) }
    /// Merges the top-level fields of `json` into record `id`; a `null` removes a field.
    @discardableResult
    package func patch(id: String, json: String) throws -> UInt64 { try storage.enqueue(.patch, id: id, json: json) }
    /// Creates record `id`; refused at once when it already exists locally.
    @discardableResult
    package func insert(id: String, json: String) throws -> UInt64 { try storage.enqueue(.insert, id: id, json: json) }
    /// Deletes record `id` (succeeds whether or not it exists).
    @discardableResult
    package func delete(id: String) throws -> UInt64 { try storage.enqueue(.delete, id: id, json: nil) }

    /// Queues a put (or a create-only insert) of each record, in one transaction: all or none.
    @discardableResult
    package func write(_ records: [Record], operation: Mutation.Operation = .put) throws -> [UInt64] {
        try storage.enqueueAll(records: records, operation: operation)
    }

    /// Record `id` as the app sees it, or nil.
    package func record(id: String) throws -> JSONValue? {
        try storage.record(id: id).map { try JSONReader(bytes: $0).readValue() }
    }

    /// The attachments the replica knows of (see ``DeltaSnapReplica/attachmentStatuses()``).
    package func attachmentStatuses() throws -> [AttachmentStatus] {
        try storage.attachmentStatuses(attachments)
    }

    /// Writes not yet settled, oldest first (see ``DeltaSnapReplica/pendingWrites(includeAcknowledged:)``).
    package func pendingWrites(includeAcknowledged: Bool = true) throws -> [PendingWrite] {
        try storage.pendingWrites(includeAcknowledged: includeAcknowledged)
    }
}

extension DeltaSnapReplica {
    /// Replaces record `id` by `json` locally and queues the write; visible at once.
    @discardableResult
    public func put(id: String, json: String) throws -> UInt64 { try storage.enqueue(.put, id: id, json: json) }
    /// Merges the top-level fields of `json` into record `id` locally (`null` removes a
    /// field) and queues only those fields: a pull never overwrites them while queued.
    @discardableResult
    public func patch(id: String, json: String) throws -> UInt64 { try storage.enqueue(.patch, id: id, json: json) }
    /// Creates record `id` (create-only: the server keeps the first arrival for an id).
    @discardableResult
    public func insert(id: String, json: String) throws -> UInt64 { try storage.enqueue(.insert, id: id, json: json) }
    /// Deletes record `id` locally and queues the delete.
    @discardableResult
    public func delete(id: String) throws -> UInt64 { try storage.enqueue(.delete, id: id, json: nil) }
    /// Queues a put (or insert) of each record in one transaction.
    @discardableResult
    package func write(_ records: [Record], operation: Mutation.Operation = .put) throws -> [UInt64] {
        try storage.enqueueAll(records: records, operation: operation)
    }
}

extension ReplicaStorage {
    /// Parses `json` (nil for a delete) and queues the write.
    func enqueue(_ operation: Mutation.Operation, id: String, json: String?) throws -> UInt64 {
        let value = try json.map { text -> JSONValue in
            let reader = JSONReader(bytes: Array(text.utf8))
            let value = try reader.readValue()
            guard try reader.isAtEnd() else { throw reader.error("unexpected data after the value") }
            return value
        }
        return try enqueue(operation, id: id, value: value, now: Date())
    }

    func enqueueAll(records: [Record], operation: Mutation.Operation) throws -> [UInt64] {
        let writes = try records.map { record -> (Mutation.Operation, String, JSONValue?) in
            guard !record.isHidden else { throw MutationRefusal(code: "reserved_field", message: "record \"\(record.id)\": use a delete to hide a record") }
            return (operation, record.id, try JSONReader(bytes: record.bytes).readValue())
        }
        return try enqueueAll(writes, now: Date())
    }
}
