import DeltaSnapCore
import DeltaSnapSQLite
import Foundation

/// A view's file: one scope per partition the user holds (``ReplicaScope``); the view's own
/// bookkeeping (its index's ETag and sequence) in scope `""`.
extension ReplicaStorage {
    /// The partitions holding server data, with the token each holds.
    func heldPartitions() throws -> [String: String] {
        let statement = try db.prepare("SELECT collection, value FROM state WHERE key = 'token' AND collection != ''")
        var held: [String: String] = [:]
        while try statement.step() { held[statement.string(0)] = statement.string(1) }
        return held
    }

    /// The partitions with writes the server has not accepted yet.
    func partitionsWithQueuedWrites() throws -> [String] {
        let statement = try db.prepare("SELECT DISTINCT collection FROM pending WHERE acked = 0 AND collection != '' ORDER BY collection")
        var partitions: [String] = []
        while try statement.step() { partitions.append(statement.string(0)) }
        return partitions
    }

    /// Removes every row of `partition` (records, state, queued writes, local values) in
    /// one transaction — its data leaves the device — and returns the writes that were
    /// still queued, which will never be sent.
    func drop(partition: String) throws -> [PendingWrite] {
        precondition(CollectionPath(partition)?.key != nil, "only a partition is dropped")
        return try withScope(try ReplicaScope.of(partition, in: db)) {
            try writeTransaction {
                noteEverythingChanged()
                let lost = try pendingWrites(includeAcknowledged: false)
                for table in ["records", "state", "pending", "overlay"] {
                    try db.execute("DELETE FROM \(table) WHERE \(scope.condition())")
                }
                // Its files leave with its directory: nothing of it is left to settle.
                try unindexAllReferences(nil)
                try db.execute("DELETE FROM attachment_changes WHERE collection = \(scope.literal)")
                return lost
            }
        }
    }

    /// Runs `body` with this storage reading every partition of collection `name` at once
    /// (queries over a user's whole view of a collection).
    func acrossPartitions<T>(of name: String, _ body: () throws -> T) throws -> T {
        try withScope(try ReplicaScope.partitions(of: name, in: db), body)
    }
}
