import DeltaSnapCore
import DeltaSnapSQLite
import Foundation

/// The write queue and the overlay: local writes, what a push reports, what a pull settles.
extension ReplicaStorage {
    // MARK: - Local writes

    /// Queues one write and updates the record's local value, in one transaction; returns
    /// its `seq`. Throws the refusal when the write can never be accepted given the local
    /// view (an insert of an id that exists, a patch of one that does not, a bad value).
    func enqueue(_ operation: Mutation.Operation, id: String, value: JSONValue?, now: Date) throws -> UInt64 {
        try writeTransaction {
            try enqueueInTransaction(operation, id: id, value: value, now: now)
        }
    }

    /// Queues many writes in one transaction (all or none).
    func enqueueAll(_ writes: [(Mutation.Operation, String, JSONValue?)], now: Date) throws -> [UInt64] {
        try writeTransaction {
            try writes.map { try enqueueInTransaction($0.0, id: $0.1, value: $0.2, now: now) }
        }
    }

    private func enqueueInTransaction(_ operation: Mutation.Operation, id: String, value: JSONValue?, now: Date) throws -> UInt64 {
        let normalized = try value.map(Self.normalize)
        let seq = try lastSeq() + 1
        let mutation = Mutation(seq: seq, operation: operation, id: id, value: normalized)
        let current = try record(id: id).map { try Record.parse($0) }
        // The strict rule against the local view: what would certainly be refused is not queued.
        let local = try RecordMerge.apply(mutation, to: current)
        if let earlier = try unsentTail(of: id),
           let folded = WriteCoalescing.fold(mutation, into: earlier, serverHasRecord: try serverRecord(id: id) != nil) {
            try replace(earlier, by: folded)
            try rebuildOverlay(id: id)
            return earlier.seq
        }
        let insert = try statement("INSERT INTO pending(collection, seq, op, id, value, acked, created_at, base) VALUES (\(scope.literal), ?, ?, ?, ?, 0, ?, ?)")
        try insert.bind(1, seq)
        try insert.bind(2, operation.rawValue)
        try insert.bind(3, id)
        if let normalized { try insert.bind(4, blob: CanonicalJSON.bytes(normalized)) } else { try insert.bindNull(4) }
        try insert.bind(5, Int64(now.timeIntervalSince1970 * 1000))
        // What the device showed when the write was made: the server state it holds.
        if let base = try self.value(for: "token") { try insert.bind(6, base) } else { try insert.bindNull(6) }
        try insert.run()
        if let normalized { try addReferences(.pendingWrite, id: String(seq), bytes: CanonicalJSON.bytes(normalized)) }
        try setValue(String(seq), for: "lastSeq")
        try setOverlay(id: id, to: local)
        return seq
    }

    /// The newest queued write on record `id` when it has never been sent — the only kind a
    /// new write may be folded into (``WriteCoalescing``): a write that went out once may have
    /// been processed under its `seq`, so it is retried exactly as it was.
    private func unsentTail(of id: String) throws -> Mutation? {
        let newest = try statement("SELECT seq, op, value, acked, base FROM pending WHERE \(scope.condition()) AND id = ? ORDER BY seq DESC LIMIT 1")
        try newest.bind(1, id)
        defer { newest.reset() }
        guard try newest.step(), !newest.bool(3), newest.uint64(0) > (try sentThrough()) else { return nil }
        guard let operation = Mutation.Operation(rawValue: newest.string(1)) else { return nil }
        let value = newest.isNull(2) ? nil : try JSONReader(bytes: newest.blob(2)).readValue()
        return Mutation(seq: newest.uint64(0), operation: operation, id: id, value: value, base: newest.isNull(4) ? nil : newest.string(4))
    }

    /// Puts `folded` where the unsent write `earlier` was queued (or drops it).
    private func replace(_ earlier: Mutation, by folded: WriteCoalescing.Folded) throws {
        switch folded {
        case .write(let write):
            let update = try statement("UPDATE pending SET op = ?, value = ? WHERE \(scope.condition()) AND seq = ?")
            try update.bind(1, write.operation.rawValue)
            if let value = write.value { try update.bind(2, blob: CanonicalJSON.bytes(value)) } else { try update.bindNull(2) }
            try update.bind(3, earlier.seq)
            try update.run()
            try indexReferences(.pendingWrite, id: String(earlier.seq), bytes: write.value.map { CanonicalJSON.bytes($0) })
        case .nothing:
            let drop = try statement("DELETE FROM pending WHERE \(scope.condition()) AND seq = ?")
            try drop.bind(1, earlier.seq)
            try drop.run()
            try unindexReferences(.pendingWrite, id: String(earlier.seq))
        }
    }

    /// Every queued write numbered up to this has been handed to a push at least once.
    /// Batches leave in `seq` order, so one number says it for all of them.
    private func sentThrough() throws -> UInt64 {
        try value(for: "sentThrough").flatMap { UInt64($0) } ?? 0
    }

    /// The next batch to push — the oldest writes the server has not accepted — marked as
    /// sent in the same transaction, before any byte of it leaves: a local write made from
    /// then on (by this process or another sharing the file) is never folded into it.
    func claimPushBatch(limit: Int) throws -> [PendingWrite] {
        try writeTransaction {
            let batch = try pendingWrites(includeAcknowledged: false, limit: limit)
            if let last = batch.last?.seq, last > (try sentThrough()) { try setValue(String(last), for: "sentThrough") }
            return batch
        }
    }

    /// A value in canonical shape (members sorted, duplicates refused), whoever built it.
    private static func normalize(_ value: JSONValue) throws -> JSONValue {
        try JSONReader(bytes: CanonicalJSON.bytes(value)).readValue()
    }

    /// The highest write number ever given out (kept when the queue drains, so numbers are
    /// never reused: the server would take a reused one for a retry).
    func lastSeq() throws -> UInt64 {
        let statement = try statement("SELECT value FROM state WHERE \(scope.condition()) AND key = 'lastSeq'")
        guard try statement.step() else { return 0 }
        defer { statement.reset() }
        return UInt64(statement.string(0)) ?? 0
    }

    /// This replica's client id, created on first use (under the write lock: an app and a
    /// `deltasnap sync` sharing the file must not each create one).
    func clientID() throws -> String {
        if let existing = try value(for: "clientID") { return existing }
        return try writeTransaction {
            if let existing = try value(for: "clientID") { return existing }
            let id = UUID().uuidString.lowercased()
            try setValue(id, for: "clientID")
            return id
        }
    }

    /// Gives this replica a new client id: its write numbers went backwards (a restored
    /// backup), so the server's ledger for the old id would take new writes for old ones.
    func rotateClientID() throws {
        try writeTransaction { try setValue(UUID().uuidString.lowercased(), for: "clientID") }
    }

    func value(for key: String) throws -> String? {
        let statement = try statement("SELECT value FROM state WHERE \(scope.condition()) AND key = ?")
        try statement.bind(1, key)
        guard try statement.step() else { return nil }
        defer { statement.reset() }
        return statement.string(0)
    }

    func setValue(_ value: String?, for key: String) throws {
        if let value {
            let upsert = try statement(
                "INSERT INTO state(collection, key, value) VALUES (\(scope.literal), ?, ?) ON CONFLICT(\(scope.key("key"))) DO UPDATE SET value = excluded.value")
            try upsert.bind(1, key)
            try upsert.bind(2, value)
            try upsert.run()
        } else {
            let delete = try statement("DELETE FROM state WHERE \(scope.condition()) AND key = ?")
            try delete.bind(1, key)
            try delete.run()
        }
    }

    // MARK: - The queue

    /// Writes in the queue, oldest first: those not yet accepted, or all of them.
    func pendingWrites(includeAcknowledged: Bool, afterSeq: UInt64 = 0, limit: Int = Int.max) throws -> [PendingWrite] {
        // A bundled replica read in place holds no local writes (any write adopts it first),
        // and one baked by an older release has no `base` column.
        guard borrowed == nil else { return [] }
        let statement = try statement("""
            SELECT seq, op, id, value, acked, created_at, base FROM pending
            WHERE \(scope.condition()) AND seq > ? AND (acked = 0 OR ?) ORDER BY seq LIMIT ?
            """)
        try statement.bind(1, afterSeq)
        try statement.bind(2, includeAcknowledged)
        try statement.bind(3, Int64(min(limit, Int(Int64.max))))
        var writes: [PendingWrite] = []
        while try statement.step() {
            let value = statement.isNull(3) ? nil : try JSONReader(bytes: statement.blob(3)).readValue()
            writes.append(PendingWrite(
                seq: statement.uint64(0), operation: Mutation.Operation(rawValue: statement.string(1)) ?? .put,
                id: statement.string(2), value: value, createdAt: Date(timeIntervalSince1970: Double(statement.int64(5)) / 1000),
                isAcknowledged: statement.bool(4), base: statement.isNull(6) ? nil : statement.string(6)))
        }
        return writes
    }

    /// How many writes wait for the server (`acknowledged: false`) or for the pull that
    /// brings their value (`true`).
    func pendingCount(acknowledged: Bool) throws -> Int {
        Int(try db.scalarInt("SELECT count(*) FROM pending WHERE \(scope.condition()) AND acked = \(acknowledged ? 1 : 0)") ?? 0)
    }

    /// The newest accepted write, for dropping what a following pull settles.
    func lastAcknowledgedSeq() throws -> UInt64? {
        try db.scalarInt("SELECT max(seq) FROM pending WHERE \(scope.condition()) AND acked = 1").map { UInt64($0) }
    }

    /// Records a push answer in one transaction: accepted writes stay in the overlay
    /// (acknowledged) until a pull brings their value; refused ones leave it at once.
    func settle(accepted: [UInt64], refused: [(write: PendingWrite, refusal: MutationRefusal)]) throws {
        try writeTransaction {
            let ack = try statement("UPDATE pending SET acked = 1 WHERE \(scope.condition()) AND seq = ?")
            for seq in accepted {
                try ack.bind(1, seq)
                try ack.run()
            }
            let drop = try statement("DELETE FROM pending WHERE \(scope.condition()) AND seq = ?")
            for (write, _) in refused {
                try drop.bind(1, write.seq)
                try drop.run()
                try unindexReferences(.pendingWrite, id: String(write.seq))
            }
            for id in Set(refused.map(\.write.id)) { try rebuildOverlay(id: id) }
        }
    }

    /// Inside a pull's transaction: drops the writes accepted up to `seq` (the pull brought
    /// their value), then recomputes every local value over the new server state.
    func settleAfterPull(droppingAcknowledgedThrough seq: UInt64?) throws {
        if let seq {
            // Their file references go with them (O(writes dropped)).
            let unindex = try statement("""
                DELETE FROM attachment_refs WHERE collection = \(scope.literal) AND source = \(AttachmentIndex.Source.pendingWrite.rawValue)
                AND id IN (SELECT CAST(seq AS TEXT) FROM pending WHERE \(scope.condition()) AND acked = 1 AND seq <= ?)
                """)
            try unindex.bind(1, seq)
            try unindex.run()
            let drop = try statement("DELETE FROM pending WHERE \(scope.condition()) AND acked = 1 AND seq <= ?")
            try drop.bind(1, seq)
            try drop.run()
        }
        if isNotingChanges {
            // Each local value is dropped and rebuilt: the ones that go (their writes were
            // accepted and are now the server's) change what the app sees too. O(local values).
            let local = try db.prepare("SELECT id FROM overlay WHERE \(scope.condition())")
            while try local.step() { noteChanged(local.string(0)) }
        }
        try db.execute("DELETE FROM overlay WHERE \(scope.condition())")
        try unindexAllReferences(.overlay)
        let ids = try db.prepare("SELECT DISTINCT id FROM pending WHERE \(scope.condition())")
        var pendingIDs: [String] = []
        while try ids.step() { pendingIDs.append(ids.string(0)) }
        for id in pendingIDs { try rebuildOverlay(id: id) }
    }

    // MARK: - The overlay

    /// Recomputes record `id`'s local value: the server's value with its pending writes
    /// replayed in order (leniently: the server's answer settles what may not apply).
    func rebuildOverlay(id: String) throws {
        let writes = try statement("SELECT seq, op, value FROM pending WHERE \(scope.condition()) AND id = ? ORDER BY seq")
        try writes.bind(1, id)
        var current = try serverRecord(id: id).map { try Record.parse($0) }
        var any = false
        while try writes.step() {
            any = true
            let value = writes.isNull(2) ? nil : try JSONReader(bytes: writes.blob(2)).readValue()
            let mutation = Mutation(seq: writes.uint64(0), operation: Mutation.Operation(rawValue: writes.string(1)) ?? .put, id: id, value: value)
            current = RecordMerge.applyPending(mutation, to: current)
        }
        if any {
            try setOverlay(id: id, to: current)
        } else {
            let delete = try statement("DELETE FROM overlay WHERE \(scope.condition()) AND id = ?")
            try delete.bind(1, id)
            try delete.run()
            try unindexReferences(.overlay, id: id)
            noteChanged(id)
        }
    }

    private func setOverlay(id: String, to record: Record?) throws {
        let upsert = try statement(
            "INSERT INTO overlay(collection, id, body) VALUES (\(scope.literal), ?, ?) ON CONFLICT(\(scope.key("id"))) DO UPDATE SET body = excluded.body")
        try upsert.bind(1, id)
        if let record { try upsert.bind(2, blob: record.bytes) } else { try upsert.bindNull(2) }
        try upsert.run()
        try indexReferences(.overlay, id: id, bytes: record?.bytes)
        noteChanged(id)
    }
}
