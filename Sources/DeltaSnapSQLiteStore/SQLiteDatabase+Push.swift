import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapStore
import Foundation

extension SQLiteDatabase {
    /// Applies one client's batch of writes as at most one new version of `collection`.
    ///
    /// Writes are merged in the batch's order on top of the committed state (per field for a
    /// patch; an insert never replaces a visible record; deleting what is gone succeeds). A
    /// write whose `seq` the server already processed for this client is not applied again:
    /// it gets its stored result. Records' replaced values go to their history. Everything —
    /// records, results, the client's last `seq` — commits in one transaction.
    ///
    /// Write numbers are kept per (collection, `user`, `client`): one user cannot advance
    /// another's. An error reading the store throws (nothing is committed, the client
    /// retries); only the writes themselves are refused.
    package func push(
        _ mutations: [ParsedMutation], from client: String, user: String? = nil, to collection: String, retention: PushRetention = PushRetention(),
        merge policy: MergePolicy = .fields, attachments proof: AttachmentProof = .unchecked
    ) throws -> PushOutcome {
        let batch = PushBatch(mutations, from: client, user: user, to: collection, retention: retention, merge: policy, attachments: proof)
        var pushed: PushOutcome?
        try commit(StoreWrite([.push(batch)])) { if case .pushed(_, let outcome) = $0 { pushed = outcome } }
        return pushed!
    }

    /// ``push(_:from:user:to:retention:merge:attachments:)`` in the caller's transaction.
    func push(_ batch: PushBatch) throws -> PushOutcome {
        let (mutations, client, user, collection, policy, proof) = (batch.mutations, batch.client, batch.user, batch.collection, batch.merge, batch.attachments)
        try CollectionPath.validate(collection)
        // Retention runs on the real clock: a fixed SOURCE_DATE_EPOCH is for reproducible
        // bakes and must not make a server prune everything, or nothing.
        let now = Int64(Date().timeIntervalSince1970)
        let ledger = PushLedger(db: db, collection: collection, client: PushPlan.ledgerKey(client: client, user: user), displayName: client)
        let lastSeq = try ledger.lastSeq()
        let writer = try CollectionWriter(db: db, statements: statements, collection: collection, configuration: configuration, blobs: blobs)
        let fork = policy == .fork
            ? ForkCheck(client: client, epoch: writer.epoch, committedByThisClient: { try ledger.committed(version: $0) }) : nil
        let plan = try PushPlan(
            mutations, lastSeq: lastSeq, storedStatus: { try ledger.storedStatus(seq: $0) }, stored: { try writer.stored(id: $0) }, fork: fork,
            attachmentSize: { sha256 in
                // What the writer did not prove counts only where this collection refers to it already.
                guard try proof.allows(sha256) || writer.refers(to: sha256) else { return nil }
                return blobs.size(of: sha256)
            })
        for (id, final) in plan.finalValues {
            try writer.put(final ?? Record.tombstone(id: id))
        }
        let written = try writer.commit()
        let results = plan.results(committedAs: written.head?.version ?? 0)
        if written.committed, let head = written.head {
            try ledger.recordHistory(plan.replacedValues, replacedIn: head.version, at: head.committedAt, keptAt: now)
        }
        try ledger.save(lastSeq: plan.newLastSeq, results: results.filter { $0.seq > lastSeq }, committed: written.committed, at: now)
        try ledger.prune(resultsBefore: now - batch.retention.results, historyBefore: now - batch.retention.history)
        let response = PushResponse(
            collection: collection, client: client, lastSeq: plan.newLastSeq, committed: written.committed,
            token: written.head?.token.description, results: results)
        return PushOutcome(response: response, head: written.head)
    }

    /// The values writes replaced in record `id`, newest first.
    package func history(of id: String, in collection: String, limit: Int = 100) throws -> [HistoryEntry] {
        try read { _ in
            let statement = try db.prepare("""
                SELECT body, version, replaced_in, replaced_at, client FROM history
                WHERE collection = ? AND id = ? ORDER BY replaced_in DESC LIMIT ?
                """)
            try statement.bind(1, collection)
            try statement.bind(2, id)
            try statement.bind(3, limit)
            var entries: [HistoryEntry] = []
            while try statement.step() {
                entries.append(HistoryEntry(
                    value: statement.blob(0), version: statement.uint64(1), replacedIn: statement.uint64(2),
                    replacedAt: statement.int64(3), replacedBy: statement.string(4)))
            }
            return entries
        }
    }
}

/// The push tables of one (collection, client): its last `seq`, its results, the history.
struct PushLedger {
    let db: SQLiteConnection
    let collection: String
    /// The ledger key: the user's name and the client id.
    let client: String
    /// What history shows as the writer: the client id alone.
    let displayName: String

    func lastSeq() throws -> UInt64 {
        let statement = try db.prepare("SELECT last_seq FROM push_clients WHERE collection = ? AND client = ?")
        try statement.bind(1, collection)
        try statement.bind(2, client)
        guard try statement.step() else { return 0 }
        defer { statement.reset() }
        return statement.uint64(0)
    }

    func storedStatus(seq: UInt64) throws -> MutationResult.Status? {
        let statement = try db.prepare("SELECT version, error, message FROM push_results WHERE collection = ? AND client = ? AND seq = ?")
        try statement.bind(1, collection)
        try statement.bind(2, client)
        try statement.bind(3, seq)
        guard try statement.step() else { return nil }
        defer { statement.reset() }
        return MutationResult.Status(
            keptVersion: statement.isNull(0) ? nil : statement.uint64(0), error: statement.isNull(1) ? nil : statement.string(1),
            message: statement.isNull(2) ? nil : statement.string(2))
    }

    /// Whether one of this client's pushes committed `version` (not merely named it: a batch
    /// that changed nothing names the head).
    func committed(version: UInt64) throws -> Bool {
        let statement = try db.prepare(
            "SELECT 1 FROM push_results WHERE collection = ? AND client = ? AND version = ? AND error IS NULL AND committed = 1 LIMIT 1")
        try statement.bind(1, collection)
        try statement.bind(2, client)
        try statement.bind(3, version)
        defer { statement.reset() }
        return try statement.step()
    }

    func save(lastSeq: UInt64, results: [MutationResult], committed: Bool, at now: Int64) throws {
        let client = try db.prepare("""
            INSERT INTO push_clients(collection, client, last_seq) VALUES (?, ?, ?)
            ON CONFLICT(collection, client) DO UPDATE SET last_seq = excluded.last_seq
            """)
        try client.bind(1, collection)
        try client.bind(2, self.client)
        try client.bind(3, lastSeq)
        try client.run()
        let insert = try db.prepare(
            "INSERT OR REPLACE INTO push_results(collection, client, seq, version, error, message, at, committed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        for result in results {
            guard let columns = result.status.keptColumns else { continue }
            try insert.bind(1, collection)
            try insert.bind(2, self.client)
            try insert.bind(3, result.seq)
            if let version = columns.version { try insert.bind(4, version) } else { try insert.bindNull(4) }
            if let error = columns.error { try insert.bind(5, error) } else { try insert.bindNull(5) }
            if let message = columns.message { try insert.bind(6, message) } else { try insert.bindNull(6) }
            try insert.bind(7, now)
            try insert.bind(8, committed)
            try insert.run()
        }
    }

    func recordHistory(_ replaced: [(record: Record, version: UInt64)], replacedIn version: UInt64, at time: Int64, keptAt now: Int64) throws {
        guard !replaced.isEmpty else { return }
        let insert = try db.prepare("INSERT OR REPLACE INTO history(collection, id, replaced_in, version, replaced_at, client, body, kept_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        for (record, recordVersion) in replaced {
            try insert.bind(1, collection)
            try insert.bind(2, record.id)
            try insert.bind(3, version)
            try insert.bind(4, recordVersion)
            try insert.bind(5, time)
            try insert.bind(6, displayName)
            try insert.bind(7, blob: record.bytes)
            try insert.bind(8, now)
            try insert.run()
        }
    }

    func prune(resultsBefore: Int64, historyBefore: Int64) throws {
        let results = try db.prepare("DELETE FROM push_results WHERE collection = ? AND at < ?")
        try results.bind(1, collection)
        try results.bind(2, resultsBefore)
        try results.run()
        let history = try db.prepare("DELETE FROM history WHERE collection = ? AND kept_at < ?")
        try history.bind(1, collection)
        try history.bind(2, historyBefore)
        try history.run()
    }
}
