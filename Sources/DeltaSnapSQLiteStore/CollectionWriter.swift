import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapStore
import DeltaSnapTrust

/// Puts records into one collection inside a write transaction; see ``SQLiteDatabase/write(to:_:)``.
///
/// Only records whose canonical bytes change are written, with the new version; unchanged
/// ones keep theirs, so writing the same data again creates no version.
package final class CollectionWriter {
    package let collection: String
    /// The version this write commits as.
    package let version: UInt64

    let db: SQLiteConnection
    private let cid: Int64
    let epoch: String
    private let configuration: StoreConfiguration
    private var previous: CollectionHead?
    private var state: StateAccumulator
    /// The ids put in this write, for refusing a repeat: in memory up to
    /// ``seenInMemoryLimit``, then in a temporary table (SQLite's temp file, behind its
    /// bounded page cache), so an import of any size, its ids in any order, holds bounded
    /// memory (a Set of 4M ids was 150 MB).
    private var seen = Set<String>()
    private var seenSpilled = false
    /// ~20 MB of ids; small writes never touch the temporary table (tests lower it).
    package var seenInMemoryLimit = 250_000
    /// In ``putAscending(_:replacing:)``'s mode: the last id put, instead of every id seen.
    private var lastAscending: String?

    private let statements: StatementCache
    private let lookup: SQLiteStatement
    private let upsert: SQLiteStatement
    private var storedLookup: SQLiteStatement?
    private let blobs: BlobDirectory

    init(db: SQLiteConnection, statements: StatementCache, collection: String, configuration: StoreConfiguration, blobs: BlobDirectory) throws {
        self.db = db
        self.blobs = blobs
        self.statements = statements
        self.collection = collection
        self.configuration = configuration
        let reader = SQLiteReader(db: db)
        let lookupHead = try statements(SQLiteReader.headSQL + " WHERE c.name = ?")
        try lookupHead.bind(1, collection)
        // Reset at once: a statement left on a row keeps its read open past the commit.
        let found = try lookupHead.step() ? SQLiteReader.head(from: lookupHead) : nil
        lookupHead.reset()
        if let head = found {
            previous = head
            let select = try statements("SELECT cid FROM collections WHERE name = ?")
            try select.bind(1, collection)
            _ = try select.step()
            cid = select.int64(0)
            select.reset()
            epoch = head.epoch
            let digest = ReviewPaths.keepsNoDigest(collection) ? nil : try reader.digest(of: collection) ?? reader.recomputedDigest(of: collection)
            state = StateAccumulator(collection: collection, checksum: head.checksum, count: head.count, digest: digest)
            version = head.version + 1
        } else {
            // Created inside this transaction: rolled back with it if nothing is committed.
            epoch = configuration.epoch(forNew: collection)
            let insert = try statements("INSERT INTO collections(name, epoch, head, checksum, visible) VALUES (?, ?, 0, 0, 0)")
            try insert.bind(1, collection)
            try insert.bind(2, epoch)
            try insert.run()
            cid = db.lastInsertRowID
            state = StateAccumulator(collection: collection, checksum: .empty, count: 0, digest: ReviewPaths.keepsNoDigest(collection) ? nil : .empty)
            version = 1
        }
        lookup = try statements("SELECT hidden, hash, body FROM records WHERE cid = ? AND id = ?")
        upsert = try statements("""
            INSERT INTO records(cid, id, version, hidden, hash, body) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(cid, id) DO UPDATE SET
                version = excluded.version, hidden = excluded.hidden, hash = excluded.hash, body = excluded.body
            """)
    }

    /// Partitions with at most this many visible records keep no stored digest.
    static let smallestStoredDigest = 8

    /// Adds, changes, hides or un-hides one record. Throws ``StoreError/duplicateID(_:)``
    /// when the same id was already put in this write.
    package func put(_ record: Record) throws {
        guard try noteSeen(record.id) else { throw StoreError.duplicateID(record.id) }
        try apply(record)
    }

    /// Notes `id` as put in this write; false when it was already.
    private func noteSeen(_ id: String) throws -> Bool {
        guard seenSpilled else {
            guard seen.insert(id).inserted else { return false }
            if seen.count > seenInMemoryLimit { try spillSeen() }
            return true
        }
        let insert = try statements("INSERT OR IGNORE INTO temp.deltasnap_seen_ids(id) VALUES (?)")
        try insert.bind(1, id)
        try insert.run()
        return db.changes == 1
    }

    /// Moves the ids seen so far into the temporary table; from then on it alone holds them.
    private func spillSeen() throws {
        try db.execute("CREATE TEMP TABLE IF NOT EXISTS deltasnap_seen_ids(id TEXT PRIMARY KEY) WITHOUT ROWID; DELETE FROM temp.deltasnap_seen_ids;")
        let insert = try statements("INSERT OR IGNORE INTO temp.deltasnap_seen_ids(id) VALUES (?)")
        // In order: appends to the B-tree rather than random inserts.
        for id in seen.sorted() {
            try insert.bind(1, id)
            try insert.run()
        }
        seen = []
        seenSpilled = true
    }

    /// Whether `id` was put in this write.
    private func wasSeen(_ id: String) throws -> Bool {
        guard seenSpilled else { return seen.contains(id) }
        let select = try statements("SELECT 1 FROM temp.deltasnap_seen_ids WHERE id = ?")
        try select.bind(1, id)
        defer { select.reset() }
        return try select.step()
    }

    /// ``put(_:)`` for records in strictly ascending id order (``DeltaSnapStore/RecordStream/idsAscend``),
    /// holding no id in memory; with `replacing`, the visible records between the previous id
    /// and this one are hidden first (finish with ``hideRecordsAfterLastAscending()``).
    package func putAscending(_ record: Record, replacing: Bool) throws {
        if let last = lastAscending, !last.utf8Precedes(record.id) { throw StoreError.duplicateID(record.id) }
        if replacing { try hideVisible(after: lastAscending, before: record.id) }
        lastAscending = record.id
        try apply(record)
    }

    /// The end of an ascending replace: hides every visible record after the last one put.
    package func hideRecordsAfterLastAscending() throws {
        try hideVisible(after: lastAscending, before: nil)
    }

    /// Hides the visible records whose ids lie strictly between `after` and `before` (nil:
    /// unbounded), a page at a time.
    private func hideVisible(after: String?, before: String?) throws {
        guard previous != nil else { return }
        // Two statements, not `(? IS NULL OR id < ?)`: an upper bound inside an OR is no bound
        // of the index range, and each put would scan the rest of the collection.
        let page = try statements(before == nil
            ? "SELECT id FROM records WHERE cid = ? AND hidden = 0 AND id > ? ORDER BY id LIMIT 1000"
            : "SELECT id FROM records WHERE cid = ? AND hidden = 0 AND id > ? AND id < ? ORDER BY id LIMIT 1000")
        var from = after ?? ""
        while true {
            try page.bind(1, cid)
            try page.bind(2, from)
            if let before { try page.bind(3, before) }
            var ids: [String] = []
            while try page.step() { ids.append(page.string(0)) }
            page.reset()
            guard let last = ids.last else { return }
            for id in ids { try apply(Record.tombstone(id: id)) }
            from = last
        }
    }

    private func apply(_ record: Record) throws {
        let hash = record.isHidden ? 0 : record.hash
        // A collection created by this write holds no record yet: nothing to look up.
        var found = false
        if previous != nil {
            try lookup.bind(1, cid)
            try lookup.bind(2, record.id)
            found = try lookup.step()
        }
        let change = record.bytes.withUnsafeBytes { bytes in
            guard found else { return state.put(id: record.id, isHidden: record.isHidden, hash: hash, bytes: bytes, replacing: nil) }
            let stored = (isHidden: lookup.bool(0), hash: lookup.uint64(1))
            // The old bytes are only at hand inside this call.
            return lookup.withBlob(2) { old in
                state.put(
                    id: record.id, isHidden: record.isHidden, hash: hash, bytes: bytes,
                    replacing: StateAccumulator.StoredValue(isHidden: stored.isHidden, hash: stored.hash, bytes: old))
            }
        }
        if found { lookup.reset() }
        guard change != .unchanged else { return }
        try noteAttachments(of: record)
        try write(record, hash: hash)
    }

    /// Refuses a record that refers to a blob the store does not hold (``AttachmentRule``),
    /// and notes which blobs this collection's records refer to: who may read them.
    private func noteAttachments(of record: Record) throws {
        try statements.noteReferences(try AttachmentRule.checkAll(record, heldSize: blobs.size(of:)), of: cid)
    }

    /// Whether this collection's records refer to blob `sha256` (or did, until the next
    /// garbage collection): a push may name it again without proof (``AttachmentProof``).
    package func refers(to sha256: String) throws -> Bool {
        let select = try statements("SELECT 1 FROM attachment_refs WHERE cid = ? AND sha256 = ?")
        try select.bind(1, cid)
        try select.bind(2, sha256)
        defer { select.reset() }
        return try select.step()
    }

    /// The record `id` as committed before this write (visible or a tombstone), with the
    /// version that wrote it; `nil` when the collection never held it.
    package func stored(id: String) throws -> (record: Record, version: UInt64)? {
        let statement = try storedLookup ?? db.prepare("SELECT hidden, version, body FROM records WHERE cid = ? AND id = ?")
        storedLookup = statement
        try statement.bind(1, cid)
        try statement.bind(2, id)
        guard try statement.step() else { return nil }
        defer { statement.reset() }
        if statement.bool(0) { return (Record.tombstone(id: id), statement.uint64(1)) }
        return (try Record.parse(statement.blob(2)), statement.uint64(1))
    }

    private func write(_ record: Record, hash: UInt64) throws {
        try upsert.bind(1, cid)
        try upsert.bind(2, record.id)
        try upsert.bind(3, version)
        try upsert.bind(4, record.isHidden)
        try upsert.bind(5, hash)
        try upsert.bind(6, blob: record.bytes)
        try upsert.run()
    }

    /// Hides every visible record not put in this write (a full replace). Pages through the
    /// visible ids so memory stays bounded however many records are hidden.
    package func hideRecordsNotPut() throws {
        let page = try db.prepare("SELECT id FROM records WHERE cid = ? AND hidden = 0 AND id > ? ORDER BY id LIMIT 10000")
        var after = ""
        while true {
            try page.bind(1, cid)
            try page.bind(2, after)
            var absent: [String] = []
            var last: String?
            while try page.step() {
                let id = page.string(0)
                last = id
                if try !wasSeen(id) { absent.append(id) }
            }
            guard let last else { return }
            after = last
            for id in absent { try put(Record.tombstone(id: id)) }
        }
    }

    /// Records the version when anything changed; called by ``SQLiteDatabase/write(to:_:)``.
    func commit() throws -> WriteResult {
        // The spilled ids are of no further use: their temp file space goes back.
        if seenSpilled { try db.execute("DELETE FROM temp.deltasnap_seen_ids") }
        guard state.upserted + state.hidden > 0 else {
            // Nothing changed: no version. Throwing would roll back, but a no-op write is
            // not an error, so undo the possible collection creation explicitly.
            if previous == nil {
                let delete = try db.prepare("DELETE FROM collections WHERE cid = ?")
                try delete.bind(1, cid)
                try delete.run()
            }
            return WriteResult(collection: collection, committed: false, head: previous, upserted: 0, hidden: 0, unchanged: state.unchanged)
        }
        // Commit times never go backwards, so the version <-> time map stays monotone
        // for If-Modified-Since even if the clock steps back.
        let committedAt = configuration.commitTime(after: previous?.committedAt)
        let recordVersion = try statements("INSERT INTO versions(cid, version, committed_at) VALUES (?, ?, ?)")
        try recordVersion.bind(1, cid)
        try recordVersion.bind(2, version)
        try recordVersion.bind(3, committedAt)
        try recordVersion.run()
        let sequence = try statements.publishCommit(at: committedAt)
        let updateHead = try statements("UPDATE collections SET head = ?, checksum = ?, visible = ?, digest = ?, published = ? WHERE cid = ?")
        try updateHead.bind(1, version)
        try updateHead.bind(2, state.checksum.value)
        try updateHead.bind(3, state.count)
        // A small partition's digest is not stored: recomputing it from its few records
        // (readers and the next writer do when it is absent) costs less than writing 2 KiB per
        // partition — most of a partitioned import's writes, millions of partitions over.
        if state.count <= Self.smallestStoredDigest && CollectionPath.isPartition(collection) {
            try updateHead.bindNull(4)
        } else {
            try updateHead.bind(4, blob: (state.digest ?? .empty).bytes)
        }
        try updateHead.bind(5, sequence)
        try updateHead.bind(6, cid)
        try updateHead.run()
        let head = CollectionHead(
            name: collection, epoch: epoch,
            version: version, checksum: state.checksum, count: state.count, committedAt: committedAt, floor: previous?.floor ?? 0)
        return WriteResult(
            collection: collection, committed: true, head: head, upserted: state.upserted, hidden: state.hidden, unchanged: state.unchanged)
    }
}
