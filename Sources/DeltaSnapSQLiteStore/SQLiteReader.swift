import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapStore
import DeltaSnapTrust

/// Reads from a store inside one read transaction (see ``SQLiteDatabase/read(_:)``).
///
/// Records are handed out as canonical bytes that are valid only inside the callback, so
/// a million records stream through without being copied or held.
package struct SQLiteReader {
    let db: SQLiteConnection

    /// Every collection's head, sorted by name.
    package func collections() throws -> [CollectionHead] {
        try heads(Self.headSQL + " ORDER BY c.name")
    }

    /// The partitions of `collection`, by the name index (`NAME/` up to `NAME0`: `0` follows `/`).
    package func partitionPaths(of collection: String) throws -> [String] {
        let statement = try db.prepare("SELECT name FROM collections WHERE name > ? AND name < ? ORDER BY name")
        try statement.bind(1, collection + "/")
        try statement.bind(2, collection + "0")
        var paths: [String] = []
        while try statement.step() { paths.append(statement.string(0)) }
        return paths
    }

    /// At most `limit` partitions of `collection` whose key starts with `prefix`.
    package func partitionPaths(of collection: String, keysStartingWith prefix: String, limit: Int) throws -> [String] {
        let statement = try db.prepare("SELECT name FROM collections WHERE name >= ? AND name < ? ORDER BY name LIMIT ?")
        let start = collection + "/" + prefix
        try statement.bind(1, start)
        try statement.bind(2, collection + "0")
        try statement.bind(3, Int64(limit))
        var paths: [String] = []
        // In name order the matches come first and together: the first other name ends them.
        while try statement.step() {
            let name = statement.string(0)
            guard name.hasPrefix(start) else { break }
            paths.append(name)
        }
        return paths
    }

    /// Every collection's head but the partitions' (there may be millions: they are read
    /// one by one, ``head(of:)``), sorted by name.
    package func unpartitionedCollections() throws -> [CollectionHead] {
        try heads(Self.headSQL + " WHERE instr(c.name, '/') = 0 ORDER BY c.name")
    }

    /// The heads of the collections and partitions changed (committed, or their floor raised)
    /// under a publication sequence above `sequence`, and the highest such sequence (or
    /// `sequence` when none changed): what a watcher reads to catch up.
    package func heads(publishedAfter sequence: UInt64) throws -> (heads: [CollectionHead], through: UInt64) {
        let changed = try heads(Self.headSQL + " WHERE c.published > \(Int64(clamping: sequence))")
        return (changed, max(sequence, try latestPublished()))
    }

    /// The highest publication sequence any collection or partition changed under.
    package func latestPublished() throws -> UInt64 {
        UInt64(max(0, try db.scalarInt("SELECT max(published) FROM collections") ?? 0))
    }

    private func heads(_ sql: String) throws -> [CollectionHead] {
        let statement = try db.prepare(sql)
        var heads: [CollectionHead] = []
        while try statement.step() { heads.append(Self.head(from: statement)) }
        return heads
    }

    /// The head of `name`, or `nil` when it does not exist.
    package func head(of name: String) throws -> CollectionHead? {
        let statement = try db.prepare(Self.headSQL + " WHERE c.name = ?")
        try statement.bind(1, name)
        guard try statement.step() else { return nil }
        let head = Self.head(from: statement)
        statement.reset()
        return head
    }

    static let headSQL = """
        SELECT c.name, c.epoch, c.head, c.checksum, c.visible, c.floor,
               (SELECT v.committed_at FROM versions v WHERE v.cid = c.cid AND v.version = c.head)
        FROM collections c
        """

    static func head(from statement: SQLiteStatement) -> CollectionHead {
        CollectionHead(
            name: statement.string(0), epoch: statement.string(1), version: statement.uint64(2),
            checksum: StateChecksum(value: statement.uint64(3)), count: Int(statement.int64(4)),
            committedAt: statement.int64(6), floor: statement.uint64(5))
    }

    /// Calls `body` with each visible record's canonical bytes, sorted by id.
    package func forEachVisibleRecord(in collection: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let cursor = try visibleRecords(in: collection)
        while try cursor.next(body) {}
    }

    /// A cursor over the visible records' canonical bytes, sorted by id.
    package func visibleRecords(in collection: String) throws -> RecordCursor {
        let statement = try db.prepare("""
            SELECT body FROM records
            WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND hidden = 0
            ORDER BY id
            """)
        try statement.bind(1, collection)
        return RecordCursor(statement: statement)
    }

    /// The canonical bytes of the visible record `id` of `collection` (nil: none).
    package func visibleRecord(_ id: String, in collection: String) throws -> [UInt8]? {
        let statement = try db.prepare("""
            SELECT body FROM records WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND id = ? AND hidden = 0
            """)
        try statement.bind(1, collection)
        try statement.bind(2, id)
        return try statement.step() ? statement.blob(0) : nil
    }

    /// A cursor over up to `limit` visible records whose ids sort after `id`, sorted by id
    /// (a range of the primary key).
    package func visibleRecords(in collection: String, after id: String, limit: Int) throws -> RecordCursor {
        let statement = try db.prepare("""
            SELECT body FROM records
            WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND id > ? AND hidden = 0
            ORDER BY id LIMIT ?
            """)
        try statement.bind(1, collection)
        try statement.bind(2, id)
        try statement.bind(3, Int64(limit))
        return RecordCursor(statement: statement)
    }

    /// How many records ``visibleRecords(in:after:limit:)`` yields.
    package func visibleCount(in collection: String, after id: String, limit: Int) throws -> Int {
        let statement = try db.prepare("""
            SELECT count(*) FROM (
                SELECT 1 FROM records
                WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND id > ? AND hidden = 0
                LIMIT ?)
            """)
        try statement.bind(1, collection)
        try statement.bind(2, id)
        try statement.bind(3, Int64(limit))
        _ = try statement.step()
        defer { statement.reset() }
        return Int(statement.int64(0))
    }

    /// How many records changed or were hidden after `version` (an index range scan).
    package func changeCount(in collection: String, after version: UInt64) throws -> Int {
        let statement = try db.prepare("""
            SELECT count(*) FROM records
            WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND version > ?
            """)
        try statement.bind(1, collection)
        try statement.bind(2, version)
        _ = try statement.step()
        defer { statement.reset() }
        return Int(statement.int64(0))
    }

    /// Calls `body` with the canonical bytes of each record changed or hidden after
    /// `version` (tombstones for hidden ones), in version order. The cost depends on the
    /// number of changes, not on the collection's size.
    package func forEachChange(in collection: String, after version: UInt64, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let cursor = try changes(in: collection, after: version)
        while try cursor.next(body) {}
    }

    /// A cursor over the records changed or hidden after `version`, in version order.
    package func changes(in collection: String, after version: UInt64) throws -> RecordCursor {
        let statement = try db.prepare("""
            SELECT body FROM records
            WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND version > ?
            ORDER BY version
            """)
        try statement.bind(1, collection)
        try statement.bind(2, version)
        return RecordCursor(statement: statement)
    }

    /// The first version of `collection` committed at or after `seconds` (for
    /// `If-Modified-Since`), or `nil` when none was.
    package func versions(of collection: String, limit: Int) throws -> [(version: UInt64, committedAt: Int64)] {
        let statement = try db.prepare("""
            SELECT version, committed_at FROM versions
            WHERE cid = (SELECT cid FROM collections WHERE name = ?) ORDER BY version DESC LIMIT ?
            """)
        try statement.bind(1, collection)
        try statement.bind(2, Int64(limit))
        var found: [(version: UInt64, committedAt: Int64)] = []
        while try statement.step() { found.append((statement.uint64(0), statement.int64(1))) }
        return found
    }

    package func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) throws -> UInt64? {
        let statement = try db.prepare("""
            SELECT min(version) FROM versions
            WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND committed_at >= ?
            """)
        try statement.bind(1, collection)
        try statement.bind(2, seconds)
        _ = try statement.step()
        defer { statement.reset() }
        return statement.isNull(0) ? nil : statement.uint64(0)
    }

    /// Recomputes the checksum and count of the visible state from every record (O(n));
    /// tests compare it with the incrementally maintained head.
    package func recomputedChecksum(of collection: String) throws -> (checksum: StateChecksum, count: Int) {
        var checksum = StateChecksum.empty
        var count = 0
        try forEachVisibleRecord(in: collection) { bytes in
            checksum.add(hash: XXH64.hash(bytes))
            count += 1
        }
        return (checksum, count)
    }

    /// The collection's state digest as maintained by its writes; `nil` when it does not exist.
    package func digest(of collection: String) throws -> StateDigest? {
        let statement = try db.prepare("SELECT digest FROM collections WHERE name = ?")
        try statement.bind(1, collection)
        guard try statement.step(), !statement.isNull(0) else { return nil }
        defer { statement.reset() }
        return statement.withBlob(0) { StateDigest(bytes: $0) }
    }

    /// The state digest recomputed from every visible record (O(n)).
    package func recomputedDigest(of collection: String) throws -> StateDigest {
        let statement = try db.prepare(
            "SELECT id, body FROM records WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND hidden = 0")
        try statement.bind(1, collection)
        var digest = StateDigest.empty
        while try statement.step() {
            let id = statement.string(0)
            statement.withBlob(1) { digest.add(collection: collection, id: id, canonical: $0) }
        }
        return digest
    }

    /// The publication sequence: raised by every commit to any collection, never lowered.
    /// 0 for a store that never committed.
    package func publicationSequence() throws -> UInt64 {
        UInt64(try db.scalarInt("SELECT sequence FROM publication WHERE id = 1") ?? 0)
    }
}

/// Steps through records' canonical bytes one at a time (see ``SQLiteReader``).
package final class RecordCursor {
    private let statement: SQLiteStatement
    private var finished = false

    init(statement: SQLiteStatement) {
        self.statement = statement
    }

    /// Calls `body` with the next record's bytes (valid only inside `body`); false at the end.
    package func next(_ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
        guard !finished, try statement.step() else {
            finished = true
            return false
        }
        try statement.withBlob(0, body)
        return true
    }
}

extension SQLiteReader {
    /// The media type `collection`'s records refer to blob `sha256` with, or nil when they
    /// do not refer to it.
    func attachmentType(_ sha256: String, in collection: String) throws -> String? {
        let statement = try db.prepare("""
            SELECT r.type FROM attachment_refs r JOIN collections c ON c.cid = r.cid WHERE c.name = ? AND r.sha256 = ?
            """)
        try statement.bind(1, collection)
        try statement.bind(2, sha256)
        guard try statement.step() else { return nil }
        defer { statement.reset() }
        return statement.string(0)
    }
}
