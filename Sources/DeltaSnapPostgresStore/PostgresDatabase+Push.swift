import DeltaSnapCore
import DeltaSnapStore
import Foundation
import PostgresNIO

extension PostgresDatabase {
    /// One client's ordered batch of offline writes, committed as at most one version under
    /// the collection's row lock — the same plan (``DeltaSnapStore/PushPlan``), ledger and
    /// history as the SQLite store's `push`, so a client cannot tell the stores apart.
    ///
    /// Runs in the caller's transaction, as a ``DeltaSnapStore/StoreWrite/Step/push(_:)``.
    func push(_ batch: PushBatch, on connection: PostgresConnection) async throws -> PushOutcome {
        let (mutations, client, collection, policy, proof) = (batch.mutations, batch.client, batch.collection, batch.merge, batch.attachments)
        let retention = batch.retention
        try CollectionPath.validate(collection)
        let ledgerClient = PushPlan.ledgerKey(client: client, user: batch.user)
        // Retention runs on the real clock (see the SQLite store).
        let now = Int64(Date().timeIntervalSince1970)
        let locked = try await lock(collection, on: connection)
        var lastSeq: UInt64 = 0
        for try await seq in try await connection.checkedQuery(
            "SELECT last_seq FROM deltasnap_push_clients WHERE collection = \(collection) AND client = \(ledgerClient)", logger: logger
        ).decode(Int64.self) { lastSeq = UInt64(seq) }

        // What the plan may ask for, read in two queries rather than one per write.
        var statuses: [UInt64: MutationResult.Status] = [:]
        let retried = mutations.filter { $0.seq <= lastSeq }.map { Int64($0.seq) }
        if !retried.isEmpty {
            for try await (seq, version, error, message) in try await connection.checkedQuery("""
                SELECT seq, version, error, message FROM deltasnap_push_results
                WHERE collection = \(collection) AND client = \(ledgerClient) AND seq = ANY(\(retried))
                """, logger: logger).decode((Int64, Int64?, String?, String?).self)
            {
                statuses[UInt64(seq)] = MutationResult.Status(keptVersion: version.map { UInt64($0) }, error: error, message: message)
            }
        }
        var stored: [String: (record: Record, version: UInt64)] = [:]
        var wanted = Set(mutations.compactMap { $0.mutation?.id })
        if policy == .fork {
            // The conflict copies a write may make: a copy that replaces a record goes to history too.
            for parsed in mutations where parsed.seq > lastSeq {
                if let mutation = parsed.mutation, mutation.base != nil { wanted.insert(ConflictCopy.id(of: mutation.id, client: client, seq: parsed.seq)) }
            }
        }
        let ids = Array(wanted)
        if !ids.isEmpty {
            for try await (id, hidden, version, body) in try await connection.checkedQuery("""
                SELECT id, hidden, version, body FROM deltasnap_records WHERE cid = \(locked.cid) AND id = ANY(\(ids))
                """, logger: logger).decode((String, Bool, Int64, ByteBuffer).self)
            {
                stored[id] = (hidden ? Record.tombstone(id: id) : try Record.parse(Array(body.readableBytesView)), UInt64(version))
            }
        }

        var fork: ForkCheck?
        if policy == .fork {
            // Which of the stored records' versions this client's own pushes committed.
            var own: Set<UInt64> = []
            let versions = Array(Set(stored.values.map { Int64($0.version) }))
            for try await version in try await connection.checkedQuery("""
                SELECT DISTINCT version FROM deltasnap_push_results
                WHERE collection = \(collection) AND client = \(ledgerClient) AND error IS NULL AND committed AND version = ANY(\(versions))
                """, logger: logger).decode(Int64.self) { own.insert(UInt64(version)) }
            fork = ForkCheck(client: client, epoch: locked.epoch, committedByThisClient: { own.contains($0) })
        }
        // The blobs a write's value may refer to: those its own members and the records it
        // merges into name, looked up in one query.
        var candidates = Set<String>()
        for parsed in mutations where parsed.seq > lastSeq {
            if let value = parsed.mutation?.value { candidates.formUnion(AttachmentRule.hashesMentioned(in: value)) }
        }
        for (record, _) in stored.values { candidates.formUnion(AttachmentRule.hashesMentioned(in: record)) }
        let held = try await attachmentSizes(Array(candidates), on: connection)
        // What the writer did not prove counts only where this collection refers to it already.
        let unproven = proof.isUnchecked ? [] : candidates.filter { !proof.allows($0) }
        let referred = try await referred(Array(unproven), by: locked.cid, on: connection)
        let plan = try PushPlan(
            mutations, lastSeq: lastSeq, storedStatus: { statuses[$0] }, stored: { stored[$0] }, fork: fork,
            attachmentSize: { proof.allows($0) || referred.contains($0) ? held[$0] : nil })
        let records = plan.finalValues.map { $0.value ?? Record.tombstone(id: $0.id) }
        let written = try await merge(RecordStream(records: records, name: "push"), into: locked, replace: false, progress: nil, on: connection)
        let results = plan.results(committedAs: written.head?.version ?? 0)
        if written.committed, let head = written.head {
            for (record, version) in plan.replacedValues {
                try await connection.checkedQuery("""
                    INSERT INTO deltasnap_history(collection, id, replaced_in, version, replaced_at, client, body, kept_at)
                    VALUES (\(collection), \(record.id), \(Int64(head.version)), \(Int64(version)), \(head.committedAt), \(client),
                            \(ByteBuffer(bytes: record.bytes)), \(now))
                    ON CONFLICT (collection, id, replaced_in) DO UPDATE SET version = EXCLUDED.version,
                        replaced_at = EXCLUDED.replaced_at, client = EXCLUDED.client, body = EXCLUDED.body, kept_at = EXCLUDED.kept_at
                    """, logger: logger)
            }
        }
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_push_clients(collection, client, last_seq) VALUES (\(collection), \(ledgerClient), \(Int64(plan.newLastSeq)))
            ON CONFLICT (collection, client) DO UPDATE SET last_seq = EXCLUDED.last_seq
            """, logger: logger)
        for result in results where result.seq > lastSeq {
            guard let kept = result.status.keptColumns else { continue }
            let version = kept.version.map { Int64($0) }
            try await connection.checkedQuery("""
                INSERT INTO deltasnap_push_results(collection, client, seq, version, error, message, at, committed)
                VALUES (\(collection), \(ledgerClient), \(Int64(result.seq)), \(version), \(kept.error), \(kept.message), \(now), \(written.committed))
                ON CONFLICT (collection, client, seq) DO UPDATE SET version = EXCLUDED.version, error = EXCLUDED.error,
                    message = EXCLUDED.message, at = EXCLUDED.at, committed = EXCLUDED.committed
                """, logger: logger)
        }
        try await connection.checkedQuery(
            "DELETE FROM deltasnap_push_results WHERE collection = \(collection) AND at < \(now - retention.results)", logger: logger)
        try await connection.checkedQuery(
            "DELETE FROM deltasnap_history WHERE collection = \(collection) AND kept_at < \(now - retention.history)", logger: logger)
        let response = PushResponse(
            collection: collection, client: client, lastSeq: plan.newLastSeq, committed: written.committed,
            token: written.head?.token.description, results: results)
        return PushOutcome(response: response, head: written.head)
    }

    /// The values writes replaced in record `id`, newest first.
    package func history(of id: String, in collection: String, limit: Int = 100) async throws -> [HistoryEntry] {
        try await pool.withConnection { connection in
            var entries: [HistoryEntry] = []
            for try await (body, version, replacedIn, replacedAt, client) in try await connection.checkedQuery("""
                SELECT body, version, replaced_in, replaced_at, client FROM deltasnap_history
                WHERE collection = \(collection) AND id = \(id) ORDER BY replaced_in DESC LIMIT \(Int64(limit))
                """, logger: logger).decode((ByteBuffer, Int64, Int64, Int64, String).self)
            {
                entries.append(HistoryEntry(
                    value: Array(body.readableBytesView), version: UInt64(version), replacedIn: UInt64(replacedIn),
                    replacedAt: replacedAt, replacedBy: client))
            }
            return entries
        }
    }
}
