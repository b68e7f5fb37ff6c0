import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import PostgresNIO

extension PostgresDatabase {
    /// A ``DeltaSnapStore/ReviewPublication`` with a source (an approval of a frozen request),
    /// written inside PostgreSQL: the new values are copied from the source's rows and the
    /// replaced ones from the published rows, so no record travels to the server and back.
    /// Only the ids and the tombstones of removed records are sent.
    ///
    /// The new state (count, checksum, digest) follows from the changes alone: their `before`
    /// values are what the published path holds, proven by its version under the row lock, as
    /// the source's version proves its values are the changes' `after`. The digest's batches
    /// are hashed while PostgreSQL copies. Through `importPartitions` (the default), an approval
    /// of 100,000 records sent them twice, read them back once more to learn what they
    /// replaced, and took 3.0–3.5 s.
    ///
    /// Runs in the caller's transaction, as a ``DeltaSnapStore/StoreWrite/Step/publish(_:)``.
    func publishCopying(_ publication: ReviewPublication, on connection: PostgresConnection) async throws -> [WriteResult] {
        guard let source = publication.source, let expected = publication.expectedVersion else {
            preconditionFailure("publishCopying needs a source and a published version")
        }
        let path = publication.path
        for name in [path, publication.replaced, publication.added] + publication.alongside.map(\.path) { try CollectionPath.validate(name) }
        let kept = [(publication.replaced, publication.replacedValues), (publication.added, publication.addedValues)].filter { !$0.1.isEmpty }
        var referenced: [(path: String, reference: AttachmentReference, record: Record)] = []
        for (name, records) in [(path, publication.values)] + kept {
            for record in records {
                for reference in try AttachmentRule.references(in: record) { referenced.append((name, reference, record)) }
            }
        }
        let digestChange = Task {
            var digest = ParallelDigest(collection: path)
            for change in publication.changes {
                if let before = change.before { await digest.remove(id: change.id, canonical: before.bytes) }
                if let after = change.after { await digest.add(id: change.id, canonical: after.bytes) }
            }
            return await digest.digest()
        }
        defer { digestChange.cancel() }

        let locked = try await lockPartitions([path, source.path], digestInline: false, on: connection)
        guard var target = locked[path], UInt64(target.head) == expected else { throw publication.moved(to: locked[path].map { UInt64($0.head) }) }
        guard let from = locked[source.path], UInt64(from.head) == source.version else {
            throw StoreError.busy("\"\(source.path)\" changed while \"\(path)\" was published from it")
        }
        try await requireAttachments(referenced, on: connection)
        for change in publication.changes {
            let old = change.before.map { StateAccumulator.StoredValue(isHidden: false, hash: $0.hash, bytes: nil) }
            target.state.put(change.after ?? Record.tombstone(id: change.id), replacing: old)
        }
        let committedAt = configuration.commitTime(after: target.row.previousCommit)
        let version = target.head + 1
        let sequence = try await publishCommit(at: committedAt, on: connection)

        try await connection.checkedQuery("""
            CREATE TEMP TABLE deltasnap_publishing(
                id TEXT COLLATE "C" NOT NULL, replaced BOOLEAN NOT NULL, added BOOLEAN NOT NULL, removed BOOLEAN NOT NULL, tombstone BYTEA NOT NULL)
            ON COMMIT DROP
            """, logger: logger)
        var rows = CopyRows()
        try await copy(into: "deltasnap_publishing", columns: ["id", "replaced", "added", "removed", "tombstone"], on: connection) { emit in
            for change in publication.changes {
                rows.appendText(change.id)
                rows.appendText(change.before != nil ? "t" : "f")
                rows.appendText(change.before == nil ? "t" : "f")
                rows.appendText(change.after == nil ? "t" : "f")
                rows.appendBytes(change.after == nil ? Record.tombstone(id: change.id).bytes : [], last: true)
                if rows.isFull { try await emit(&rows) }
            }
            try await emit(&rows)
        }
        try await connection.checkedQuery("ANALYZE deltasnap_publishing", logger: logger)
        // The planner prices the per-id lookups far above their cost; compiling them would
        // take longer than running them. The joins of 100,000 ids hash in memory rather than
        // in eight batches on disk (an approval is rare; this memory is its own).
        try await connection.checkedQuery("SET LOCAL jit = off", logger: logger)
        try await connection.checkedQuery("SET LOCAL work_mem = '64MB'", logger: logger)

        // The kept values first: the replaced ones are the published rows, before they go.
        var results: [WriteResult] = []
        for (name, values) in kept {
            let replaced = name == publication.replaced
            results.append(try await keep(
                values, as: name, copiedFrom: replaced ? target.cid : from.cid, where: replaced ? "replaced" : "added",
                committedAt: committedAt, sequence: sequence, on: connection))
        }
        try await connection.checkedQuery(
            "DELETE FROM deltasnap_records r USING deltasnap_publishing s WHERE r.cid = \(target.cid) AND r.id = s.id", logger: logger)
        let written = try await count(of: """
            INSERT INTO deltasnap_records(cid, id, version, hidden, hash, body)
            SELECT \(target.cid), s.id, \(version), FALSE, r.hash, r.body
            FROM deltasnap_publishing s JOIN deltasnap_records r ON r.cid = \(from.cid) AND r.id = s.id AND NOT r.hidden
            WHERE NOT s.removed
            UNION ALL
            SELECT \(target.cid), s.id, \(version), TRUE, 0, s.tombstone FROM deltasnap_publishing s WHERE s.removed
            """, on: connection)
        guard written == publication.changes.count else {
            throw StoreError.busy("\"\(source.path)\" holds \(written) of the \(publication.changes.count) values \"\(path)\" was to get")
        }
        var digest = target.storedDigest
        digest.add(await digestChange.value)
        let digestBytes = ByteBuffer(bytes: digest.bytes)
        try await connection.checkedQuery(
            "INSERT INTO deltasnap_versions(cid, version, committed_at) VALUES (\(target.cid), \(version), \(committedAt))", logger: logger)
        try await connection.checkedQuery("""
            UPDATE deltasnap_collections
            SET head = \(version), checksum = \(Int64(bitPattern: target.state.checksum.value)), visible = \(Int64(target.state.count)),
                digest = \(digestBytes), published = \(sequence)
            WHERE cid = \(target.cid)
            """, logger: logger)
        try await noteAttachments(referenced, on: connection)
        let alongside = try await importPartitions(publication.alongside, replace: false, on: connection)
        try await connection.checkedQuery("SELECT pg_notify(\(Self.notificationChannel), \(Self.manyChangedPayload))", logger: logger)
        let head = lockedHead(target, version: version, checksum: target.state.checksum, committedAt: committedAt)
        let published = WriteResult(
            collection: path, committed: true, head: head, upserted: target.state.upserted, hidden: target.state.hidden,
            unchanged: target.state.unchanged)
        return alongside + [published] + results
    }

    /// A new partition `name` holding `values`, copied from the rows of collection `cid` the
    /// staged ids flagged `flag` name, as its first version.
    private func keep(
        _ values: [Record], as name: String, copiedFrom cid: Int64, where flag: String, committedAt: Int64, sequence: Int64,
        on connection: PostgresConnection
    ) async throws -> WriteResult {
        var state = StateAccumulator(collection: name, checksum: .empty, count: 0, digest: nil)
        for value in values { state.insert(id: value.id, hash: value.hash, canonical: value.bytes) }
        let epoch = configuration.epoch(forNew: name)
        var created: Int64?
        for try await cid in try await connection.checkedQuery("""
            INSERT INTO deltasnap_collections(name, epoch, head, checksum, visible, digest, published)
            VALUES (\(name), \(epoch), 1, \(Int64(bitPattern: state.checksum.value)), \(Int64(state.count)), \(ByteBuffer(bytes: StateDigest.empty.bytes)), \(sequence))
            ON CONFLICT (name) DO NOTHING
            RETURNING cid
            """, logger: logger).decode(Int64.self) { created = cid }
        guard let created else { throw StoreError.busy("\"\(name)\" exists already: another publication took its number") }
        try await connection.checkedQuery("INSERT INTO deltasnap_versions(cid, version, committed_at) VALUES (\(created), 1, \(committedAt))", logger: logger)
        let copied = try await count(of: """
            INSERT INTO deltasnap_records(cid, id, version, hidden, hash, body)
            SELECT \(created), r.id, 1, FALSE, r.hash, r.body
            FROM deltasnap_publishing s JOIN deltasnap_records r ON r.cid = \(cid) AND r.id = s.id AND NOT r.hidden
            WHERE s.\(unescaped: flag)
            """, on: connection)
        guard copied == values.count else { throw StoreError.busy("\(copied) of the \(values.count) values to keep in \"\(name)\" were found") }
        let head = CollectionHead(name: name, epoch: epoch, version: 1, checksum: state.checksum, count: state.count, committedAt: committedAt, floor: 0)
        return WriteResult(collection: name, committed: true, head: head, upserted: state.upserted, hidden: 0, unchanged: 0)
    }

    /// How many rows the `INSERT` `statement` wrote.
    private func count(of statement: PostgresQuery, on connection: PostgresConnection) async throws -> Int {
        var query = statement
        query.sql = "WITH written AS (\(statement.sql) RETURNING 1) SELECT count(*) FROM written"
        for try await count in try await connection.checkedQuery(query, logger: logger).decode(Int64.self) { return Int(count) }
        return 0
    }
}
