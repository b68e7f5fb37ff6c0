import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import PostgresNIO

extension PostgresDatabase {
    /// Every partition of a partitioned import, one version per partition that changed,
    /// written by a handful of set-based statements whatever their number.
    /// Partitions new to the store — the bulk of a first import — through two `COPY`s, then
    /// one `INSERT … SELECT` each for collections, versions and records, one publication and
    /// one notification; partitions that exist are merged together (``mergeExisting(_:replace:on:)``),
    /// by the write rule an import merges a collection with
    /// (``merge(_:into:replace:progress:on:)``). One transaction a partition cost a round trip and a commit each: 386 records/s
    /// into 100,000 partitions. Runs in the caller's transaction.
    func importPartitions(_ partitions: [PartitionRecords], replace: Bool, on connection: PostgresConnection) async throws -> [WriteResult] {
        // Which partition refers to which blob; checked before anything is written.
        var referenced: [(path: String, reference: AttachmentReference, record: Record)] = []
        // Where each reference stands (partition, record): a refusal names the record's line.
        var positions: [(partition: Int, record: Int)] = []
        for (p, partition) in partitions.enumerated() {
            for (r, record) in partition.records.enumerated() {
                for reference in try AttachmentRule.references(in: record) {
                    referenced.append((partition.path, reference, record))
                    positions.append((p, r))
                }
            }
        }
        try await requireAttachments(referenced, on: connection) { index, refused in
            partitions[positions[index].partition].refusal(refused, of: positions[index].record)
        }
        var existing = Set<String>()
        for try await name in try await connection.checkedQuery(
            "SELECT name FROM deltasnap_collections WHERE name = ANY(\(partitions.map(\.path)))", logger: logger
        ).decode(String.self) { existing.insert(name) }
        var results = try await insertNew(partitions.filter { !existing.contains($0.path) }, on: connection)
        results.merge(try await mergeExisting(partitions.filter { existing.contains($0.path) }, replace: replace, on: connection)) { $1 }
        try await noteAttachments(referenced, on: connection)
        return partitions.map { results[$0.path]! }
    }

    /// Refuses the write unless the store holds every blob in `referenced` with the size its
    /// reference states (``DeltaSnapStore/AttachmentRule``).
    /// `refusing` turns the refusal of `referenced[index]` into the error thrown (an import's
    /// names its line).
    func requireAttachments(
        _ referenced: [(path: String, reference: AttachmentReference, record: Record)], on connection: PostgresConnection,
        refusing: (_ index: Int, StoreError) -> any Error = { $1 }
    ) async throws {
        guard !referenced.isEmpty else { return }
        let held = try await attachmentSizes(Array(Set(referenced.map(\.reference.sha256))), on: connection)
        for (index, (_, reference, record)) in referenced.enumerated() {
            do { try AttachmentRule.check(reference, in: record, heldSize: held[reference.sha256]) } catch let refused as StoreError {
                throw refusing(index, refused)
            }
        }
    }

    /// Notes which path refers to which blob (who may read it), once every path has a row.
    func noteAttachments(_ referenced: [(path: String, reference: AttachmentReference, record: Record)], on connection: PostgresConnection) async throws {
        guard !referenced.isEmpty else { return }
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_attachment_refs(cid, sha256, type)
            SELECT c.cid, x.sha256, x.type
            FROM unnest(\(referenced.map(\.path))::text[], \(referenced.map(\.reference.sha256))::text[], \(referenced.map(\.reference.type))::text[])
                AS x(name, sha256, type)
            JOIN deltasnap_collections c ON c.name = x.name
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }

    /// Writes partitions that have no row yet as their first version, in the caller's
    /// transaction. Their count, checksum and digest are computed here (everything in the
    /// input is new); a partition whose input changes nothing (tombstones only) gets no row.
    private func insertNew(_ partitions: [PartitionRecords], on connection: PostgresConnection) async throws -> [String: WriteResult] {
        guard !partitions.isEmpty else { return [:] }
        let committedAt = configuration.commitTime(after: .min)
        var results: [String: WriteResult] = [:]
        var rows = CopyRows()
        var written: [(partition: PartitionRecords, epoch: String, state: StateAccumulator)] = []
        for partition in partitions {
            var seen = Set<String>()
            // Review bookkeeping is never published: its digest would be work for nothing.
            var state = StateAccumulator(
                collection: partition.path, checksum: StateChecksum(value: 0), count: 0, digest: ReviewPaths.keepsNoDigest(partition.path) ? nil : .empty)
            for record in partition.records {
                guard seen.insert(record.id).inserted else { throw StoreError.duplicateID(record.id) }
                state.put(record, replacing: nil)
            }
            guard state.upserted > 0 else {
                results[partition.path] = WriteResult(
                    collection: partition.path, committed: false, head: nil, upserted: 0, hidden: 0, unchanged: partition.records.count)
                continue
            }
            written.append((partition, configuration.epoch(forNew: partition.path), state))
        }
        guard !written.isEmpty else { return results }
        let sequence = try await publishCommit(at: committedAt, on: connection)
        try await connection.checkedQuery("""
            CREATE TEMP TABLE deltasnap_new_partitions(
                name TEXT COLLATE "C" NOT NULL, epoch TEXT NOT NULL, checksum BIGINT NOT NULL, visible BIGINT NOT NULL, digest BYTEA NOT NULL)
            ON COMMIT DROP
            """, logger: logger)
        try await connection.checkedQuery(
            #"CREATE TEMP TABLE deltasnap_new_records(name TEXT COLLATE "C" NOT NULL, id TEXT COLLATE "C" NOT NULL, hash BIGINT NOT NULL, body BYTEA NOT NULL) ON COMMIT DROP"#,
            logger: logger)
        try await copy(into: "deltasnap_new_partitions", columns: ["name", "epoch", "checksum", "visible", "digest"], on: connection) { emit in
            for (partition, epoch, state) in written {
                rows.appendText(partition.path)
                rows.appendText(epoch)
                rows.appendText(String(Int64(bitPattern: state.checksum.value)))
                rows.appendText(String(state.count))
                rows.appendBytes(state.digest?.bytes ?? StateDigest.empty.bytes, last: true)
                if rows.isFull { try await emit(&rows) }
            }
            try await emit(&rows)
        }
        try await copy(into: "deltasnap_new_records", columns: ["name", "id", "hash", "body"], on: connection) { emit in
            for (partition, _, _) in written {
                for record in partition.records where !record.isHidden {
                    rows.appendText(partition.path)
                    rows.appendText(record.id)
                    rows.appendText(String(Int64(bitPattern: record.hash)))
                    rows.appendBytes(record.bytes, last: true)
                    if rows.isFull { try await emit(&rows) }
                }
            }
            try await emit(&rows)
        }
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_collections(name, epoch, head, checksum, visible, digest, published)
            SELECT name, epoch, 1, checksum, visible, digest, \(sequence) FROM deltasnap_new_partitions
            """, logger: logger)
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_versions(cid, version, committed_at)
            SELECT c.cid, 1, \(committedAt) FROM deltasnap_collections c JOIN deltasnap_new_partitions n ON n.name = c.name
            """, logger: logger)
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_records(cid, id, version, hidden, hash, body)
            SELECT c.cid, r.id, 1, FALSE, r.hash, r.body FROM deltasnap_new_records r JOIN deltasnap_collections c ON c.name = r.name
            """, logger: logger)
        // One notification for them all: each instance reads the change feed once, instead of
        // one head per partition (see PostgresCollectionStore.watchForChanges).
        try await connection.checkedQuery("SELECT pg_notify(\(Self.notificationChannel), \(Self.manyChangedPayload))", logger: logger)
        for (partition, epoch, state) in written {
            let head = CollectionHead(
                name: partition.path, epoch: epoch, version: 1, checksum: state.checksum, count: state.count, committedAt: committedAt, floor: 0)
            results[partition.path] = WriteResult(
                collection: partition.path, committed: true, head: head, upserted: state.upserted, hidden: state.hidden, unchanged: state.unchanged)
        }
        return results
    }

    /// The notification payload of a commit that changed more collections than are worth
    /// naming: listeners read the change feed (`*` is no collection name).
    static let manyChangedPayload = "* 0"

    /// `COPY table (columns) FROM STDIN` in text format; `fill` writes rows with `emit`.
    func copy(
        into table: String, columns: [String], on connection: PostgresConnection,
        _ fill: (_ emit: (inout CopyRows) async throws -> Void) async throws -> Void
    ) async throws {
        try connection.refuseIfClosed()
        try await connection.copyFrom(table: table, columns: columns, logger: logger) { writer in
            try await fill { rows in
                guard !rows.buffer.isEmpty else { return }
                try await writer.write(ByteBuffer(bytes: rows.buffer))
                rows.buffer.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Records where a source follower stands, in the caller's transaction.
    func record(_ position: SourcePosition, on connection: PostgresConnection) async throws {
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_source_positions(follower, position, recorded_at)
            VALUES (\(position.follower), \(position.position), \(Int64(Date().timeIntervalSince1970)))
            ON CONFLICT (follower) DO UPDATE SET position = excluded.position, recorded_at = excluded.recorded_at
            """, logger: logger)
    }

    package func followers() async throws -> [SourceFollowerStatus] {
        try await pool.withConnection { connection in
            var found: [SourceFollowerStatus] = []
            for try await (follower, recordedAt, lagBytes, lagAt) in try await connection.checkedQuery(
                "SELECT follower, recorded_at, lag_bytes, lag_at FROM deltasnap_source_positions ORDER BY follower", logger: logger
            ).decode((String, Int64, Int64?, Int64?).self) {
                found.append(SourceFollowerStatus(follower: follower, recordedAt: recordedAt, lagBytes: lagBytes, lagMeasuredAt: lagAt))
            }
            return found
        }
    }

    package func recordSourceLag(of follower: String, bytes: Int64, at: Int64) async throws {
        _ = try await transaction { connection in
            try await connection.checkedQuery(
                "UPDATE deltasnap_source_positions SET lag_bytes = \(bytes), lag_at = \(at) WHERE follower = \(follower)", logger: logger)
        }
    }

    package func sourcePosition(of follower: String) async throws -> String? {
        try await transaction { connection in
            for try await position in try await connection.checkedQuery(
                "SELECT position FROM deltasnap_source_positions WHERE follower = \(follower)", logger: logger
            ).decode(String.self) { return position }
            return nil
        }
    }

    package func forgetSourcePosition(of follower: String) async throws -> Bool {
        try await transaction { connection in
            for try await _ in try await connection.checkedQuery(
                "DELETE FROM deltasnap_source_positions WHERE follower = \(follower) RETURNING 1", logger: logger
            ) { return true }
            return false
        }
    }
}

extension CopyRows {
    /// A text field, escaped as `COPY`'s text format needs, then a tab.
    mutating func appendText(_ text: String) {
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\\"): buffer += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x09: buffer += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x0A: buffer += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: buffer += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            default: buffer.append(byte)
            }
        }
        buffer.append(0x09)
    }

    /// A `bytea` field (`\\x` and hex), then a tab, or the end of the row when `last`.
    mutating func appendBytes(_ bytes: [UInt8], last: Bool) {
        buffer += [UInt8(ascii: "\\"), UInt8(ascii: "\\"), UInt8(ascii: "x")]
        for byte in bytes {
            buffer.append(Self.hex[Int(byte >> 4)])
            buffer.append(Self.hex[Int(byte & 0x0F)])
        }
        buffer.append(last ? 0x0A : 0x09)
    }

}
