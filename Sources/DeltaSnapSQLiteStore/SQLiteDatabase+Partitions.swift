import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapStore
import DeltaSnapTrust
import Foundation

extension SQLiteDatabase {
    /// Runs every step of `write` in one `IMMEDIATE` transaction, with its position: the one
    /// write primitive (``DeltaSnapStore/StoreWriter/commit(_:each:)``). `each` is told what
    /// every step wrote, before the commit.
    ///
    /// Held paths are written as a partitioned import writes them: partitions new to the
    /// store — most of a first import — with three statements each (their row, their version,
    /// their records) and one publication for them all, existing ones merged as any write
    /// is (``CollectionWriter``): a hundred thousand small partitions commit at the cost of
    /// one. Streamed paths go in runs of small paths written the same way, a large path
    /// merged as an import merges it, in bounded memory either way (``DeltaSnapStore/PathBatches``).
    package func commit(_ write: StoreWrite, each: (StoreWrite.Outcome) -> Void) throws {
        guard !write.isEmpty else { return }
        try db.transaction(.immediate) {
            if let position = write.position { try record(position) }
            for (index, step) in write.steps.enumerated() {
                switch step {
                case .paths(let partitions, let replace):
                    for result in try writePartitions(partitions, replace: replace) { each(.written(step: index, result)) }
                case .streamedPaths(let next, let replace):
                    try writeStreams(next, replace: replace) { each(.written(step: index, $0)) }
                case .records(let stream, let collection, let replace, let progress):
                    let result = try writeCollection(collection) { writer in
                        try Importer.write(stream, into: writer, replace: replace, progress: progress)
                    }
                    each(.written(step: index, result))
                case .push(let batch):
                    each(.pushed(step: index, try push(batch)))
                case .publish(let publication):
                    // Checked under this transaction's write lock: nothing can move the path
                    // between the check and the write.
                    let version = try SQLiteReader(db: db).head(of: publication.path)?.version
                    guard version == publication.expectedVersion else { throw publication.moved(to: version) }
                    for result in try writePartitions(publication.partitions, replace: false) { each(.written(step: index, result)) }
                case .expect(let path, let expected):
                    let version = try SQLiteReader(db: db).head(of: path)?.version
                    guard version == expected else { throw StoreWrite.moved(path, to: version, expected: expected) }
                }
            }
        }
    }

    /// Paths streamed one after the other, in the caller's transaction (see ``commit(_:each:)``).
    private func writeStreams(_ next: @escaping () throws -> PathRecords?, replace: Bool, each: (WriteResult) -> Void) throws {
        var batches = PathBatches(next)
        while let piece = try batches.next() {
            switch piece {
            case .small(let partitions):
                for result in try writePartitions(partitions, replace: replace) { each(result) }
            case .large(let part):
                // No id held for a keyed source's rows: a million-row path costs no memory per row.
                each(try writeCollection(part.path) { try Importer.write(part.records, into: $0, replace: replace) })
            }
        }
    }

    /// The body of a partitioned import, in the caller's transaction.
    private func writePartitions(_ partitions: [PartitionRecords], replace: Bool) throws -> [WriteResult] {
        var fresh = NewPartitions(db: db, statements: statements, configuration: configuration, blobs: blobs)
        let exists = try statements("SELECT 1 FROM collections WHERE name = ?")
        return try partitions.map { partition in
            try CollectionPath.validate(partition.path)
            try exists.bind(1, partition.path)
            let existing = try exists.step()
            exists.reset()
            if !existing { return try fresh.write(partition) }
            let writer = try CollectionWriter(db: db, statements: statements, collection: partition.path, configuration: configuration, blobs: blobs)
            for (index, record) in partition.records.enumerated() {
                do { try writer.put(record) } catch let error as StoreError { throw partition.refusal(error, of: index) }
            }
            if replace { try writer.hideRecordsNotPut() }
            return try writer.commit()
        }
    }

    /// Records where a source follower stands, in the caller's transaction.
    private func record(_ position: SourcePosition) throws {
        let statement = try statements("""
            INSERT INTO source_positions(follower, position, recorded_at) VALUES (?, ?, ?)
            ON CONFLICT(follower) DO UPDATE SET position = excluded.position, recorded_at = excluded.recorded_at
            """)
        try statement.bind(1, position.follower)
        try statement.bind(2, position.position)
        try statement.bind(3, Int64(Date().timeIntervalSince1970))
        _ = try statement.step()
        statement.reset()
    }

    package func sourcePosition(of follower: String) throws -> String? {
        let statement = try statements("SELECT position FROM source_positions WHERE follower = ?")
        defer { statement.reset() }
        try statement.bind(1, follower)
        return try statement.step() ? statement.string(0) : nil
    }

    package func followers() throws -> [SourceFollowerStatus] {
        let statement = try statements("SELECT follower, recorded_at, lag_bytes, lag_at FROM source_positions ORDER BY follower")
        defer { statement.reset() }
        var found: [SourceFollowerStatus] = []
        while try statement.step() {
            let measured = !statement.isNull(3)
            found.append(SourceFollowerStatus(
                follower: statement.string(0), recordedAt: statement.int64(1), lagBytes: measured ? statement.int64(2) : nil,
                lagMeasuredAt: measured ? statement.int64(3) : nil))
        }
        return found
    }

    package func recordSourceLag(of follower: String, bytes: Int64, at: Int64) throws {
        let statement = try statements("UPDATE source_positions SET lag_bytes = ?, lag_at = ? WHERE follower = ?")
        try statement.bind(1, bytes)
        try statement.bind(2, at)
        try statement.bind(3, follower)
        _ = try statement.step()
        statement.reset()
    }

    package func forgetSourcePosition(of follower: String) throws -> Bool {
        let statement = try statements("DELETE FROM source_positions WHERE follower = ?")
        try statement.bind(1, follower)
        _ = try statement.step()
        statement.reset()
        return db.changes > 0
    }
}

/// The partitions of one import that have no row yet, written as their first version: what
/// ``CollectionWriter`` does for a new collection without what a new collection cannot need
/// (a head to read, records to look up, a row to update after inserting it), and one
/// publication sequence for them all.
private struct NewPartitions {
    let db: SQLiteConnection
    let statements: StatementCache
    let configuration: StoreConfiguration
    let blobs: BlobDirectory
    /// Fixed at the first partition written: every one of them is published by it.
    private var published: (sequence: UInt64, committedAt: Int64)?

    init(db: SQLiteConnection, statements: StatementCache, configuration: StoreConfiguration, blobs: BlobDirectory) {
        self.db = db
        self.statements = statements
        self.configuration = configuration
        self.blobs = blobs
    }

    mutating func write(_ partition: PartitionRecords) throws -> WriteResult {
        var seen = Set<String>(minimumCapacity: partition.records.count)
        // A digest is only stored for partitions larger than CollectionWriter.smallestStoredDigest.
        let needsDigest = partition.records.count > CollectionWriter.smallestStoredDigest && !ReviewPaths.keepsNoDigest(partition.path)
        var state = StateAccumulator(collection: partition.path, checksum: .empty, count: 0, digest: needsDigest ? .empty : nil)
        // The blobs the records refer to, each checked as any write checks it (``AttachmentRule``).
        var referenced: [AttachmentReference] = []
        for (index, record) in partition.records.enumerated() {
            guard seen.insert(record.id).inserted else { throw partition.refusal(StoreError.duplicateID(record.id), of: index) }
            state.put(record, replacing: nil)
            guard !record.isHidden else { continue }
            do {
                referenced += try AttachmentRule.checkAll(record, heldSize: blobs.size(of:))
            } catch let error as StoreError {
                throw partition.refusal(error, of: index)
            }
        }
        guard state.upserted > 0 else {
            return WriteResult(collection: partition.path, committed: false, head: nil, upserted: 0, hidden: 0, unchanged: state.unchanged)
        }
        let (sequence, committedAt) = try publication()
        let epoch = configuration.epoch(forNew: partition.path)
        let insert = try statements(
            "INSERT INTO collections(name, epoch, head, checksum, visible, digest, published) VALUES (?, ?, 1, ?, ?, ?, ?)")
        try insert.bind(1, partition.path)
        try insert.bind(2, epoch)
        try insert.bind(3, state.checksum.value)
        try insert.bind(4, state.count)
        if state.count > CollectionWriter.smallestStoredDigest, let digest = state.digest {
            try insert.bind(5, blob: digest.bytes)
        } else {
            try insert.bindNull(5)
        }
        try insert.bind(6, sequence)
        try insert.run()
        let cid = db.lastInsertRowID
        let version = try statements("INSERT INTO versions(cid, version, committed_at) VALUES (?, 1, ?)")
        try version.bind(1, cid)
        try version.bind(2, committedAt)
        try version.run()
        let record = try statements("INSERT INTO records(cid, id, version, hidden, hash, body) VALUES (?, ?, 1, 0, ?, ?)")
        // A tombstone in a new partition hides nothing: only visible records are written.
        for visible in partition.records where !visible.isHidden {
            try record.bind(1, cid)
            try record.bind(2, visible.id)
            try record.bind(3, visible.hash)
            try record.bind(4, blob: visible.bytes)
            try record.run()
        }
        try statements.noteReferences(referenced, of: cid)
        let head = CollectionHead(
            name: partition.path, epoch: epoch, version: 1, checksum: state.checksum, count: state.count, committedAt: committedAt, floor: 0)
        return WriteResult(
            collection: partition.path, committed: true, head: head, upserted: state.upserted, hidden: state.hidden, unchanged: state.unchanged)
    }

    /// The sequence and commit time every new partition of this import is published with.
    private mutating func publication() throws -> (UInt64, Int64) {
        if let published { return published }
        let committedAt = configuration.commitTime(after: nil)
        // Raised now: an existing partition merged later in this import publishes past it.
        let sequence = try statements.publishCommit(at: committedAt)
        published = (sequence, committedAt)
        return (sequence, committedAt)
    }

}
