import DeltaSnapCore
import DeltaSnapSQLite
import Foundation

/// The file references of a replica, kept in a table as the rows holding them are written —
/// in the same transaction — so that no sync step looks for them by reading every record:
/// a one-record delta on a ten-million-record replica costs what it costs on a small one.
///
/// - `attachment_refs`: one row per reference a row makes — a record of the server state
///   (``ReferenceSource/record``), a local value of the overlay (``ReferenceSource/overlay``)
///   or a queued write (``ReferenceSource/pendingWrite``, keyed by its `seq`) — indexed by hash.
/// - `attachment_changes`: hashes whose references came or went since the attachments were
///   last settled (filled by triggers on `attachment_refs`, so no writer can forget): what a
///   sync downloads or lets go of, in O(changes). A crash between a pull and its downloads
///   leaves them there for the next sync.
enum AttachmentIndex {
    /// Which rows a reference belongs to.
    enum Source: Int64 {
        case record = 0
        case overlay = 1
        case pendingWrite = 2
    }

    static let schema = """
        CREATE TABLE IF NOT EXISTS attachment_refs(
            collection TEXT NOT NULL, source INTEGER NOT NULL, id TEXT NOT NULL,
            sha256 TEXT NOT NULL, size INTEGER NOT NULL, type TEXT NOT NULL,
            PRIMARY KEY(collection, source, id, sha256)) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS attachment_refs_by_hash ON attachment_refs(sha256);
        CREATE TABLE IF NOT EXISTS attachment_changes(
            n INTEGER PRIMARY KEY, collection TEXT NOT NULL, sha256 TEXT NOT NULL);
        CREATE INDEX IF NOT EXISTS attachment_changes_by_scope ON attachment_changes(collection, n);
        """

    /// Created after the first fill, so building the table records no change.
    static let triggers = """
        CREATE TRIGGER IF NOT EXISTS attachment_ref_added AFTER INSERT ON attachment_refs BEGIN
            INSERT INTO attachment_changes(collection, sha256) VALUES (NEW.collection, NEW.sha256);
        END;
        CREATE TRIGGER IF NOT EXISTS attachment_ref_removed AFTER DELETE ON attachment_refs BEGIN
            INSERT INTO attachment_changes(collection, sha256) VALUES (OLD.collection, OLD.sha256);
        END;
        """

    /// Whether the file `db` has the tables (not a bundled replica baked by an older
    /// release and read in place, which cannot be migrated).
    static func exists(in db: SQLiteConnection) throws -> Bool {
        try db.scalarInt("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'attachment_refs'") == 1
    }

    /// Gives a replica from before the index its tables, built once from every row of the
    /// file (the one scan of the records this release ever makes for references), under the
    /// write lock: an app and its extension may open the same old replica at once.
    static func migrate(_ db: SQLiteConnection) throws {
        guard try !exists(in: db) else { return }
        try db.transaction(.immediate) {
            guard try !exists(in: db) else { return }
            try db.execute(schema)
            let insert = try db.prepare(insertSQL)
            for (table, source, column) in [("records", Source.record, "body"), ("overlay", .overlay, "body")] {
                let rows = try db.prepare("SELECT collection, id, \(column) FROM \(table) WHERE \(column) IS NOT NULL")
                while try rows.step() {
                    let found = rows.withBlob(2) { references(in: $0) }
                    for reference in found { try add(reference, collection: rows.string(0), source: source, id: rows.string(1), with: insert) }
                }
            }
            let writes = try db.prepare("SELECT collection, seq, value FROM pending WHERE value IS NOT NULL")
            while try writes.step() {
                let found = writes.withBlob(2) { references(in: $0) }
                for reference in found { try add(reference, collection: writes.string(0), source: .pendingWrite, id: String(writes.int64(1)), with: insert) }
            }
            try db.execute(triggers)
        }
    }

    static let insertSQL = "INSERT OR IGNORE INTO attachment_refs(collection, source, id, sha256, size, type) VALUES (?, ?, ?, ?, ?, ?)"

    /// The references a row's canonical bytes make; none without the marker (no parse),
    /// none when malformed (the server refuses those; a replica never trips on one).
    static func references(in bytes: UnsafeRawBufferPointer) -> [AttachmentReference] {
        guard AttachmentReference.mayBeReferredTo(in: bytes),
              let value = try? JSONReader(bytes: Array(bytes)).readValue()
        else { return [] }
        return (try? AttachmentReference.references(in: value)) ?? []
    }

    static func add(_ reference: AttachmentReference, collection: String, source: Source, id: String, with insert: SQLiteStatement) throws {
        try insert.bind(1, collection)
        try insert.bind(2, source.rawValue)
        try insert.bind(3, id)
        try insert.bind(4, reference.sha256)
        try insert.bind(5, reference.size)
        try insert.bind(6, reference.type)
        try insert.run()
    }
}

extension ReplicaStorage {
    // MARK: - Keeping the index (inside the writer's transaction)

    /// Replaces the references of row `id` of `source` with those `bytes` makes (nil: the
    /// row is gone, or holds no value). O(references of the row) plus one index probe.
    func indexReferences(_ source: AttachmentIndex.Source, id: String, bytes: [UInt8]?) throws {
        try unindexReferences(source, id: id)
        guard let bytes else { return }
        try addReferences(source, id: id, bytes: bytes)
    }

    /// Adds the references `bytes` makes as row `id` of `source`, which has none indexed.
    func addReferences(_ source: AttachmentIndex.Source, id: String, bytes: [UInt8]) throws {
        let found = bytes.withUnsafeBytes { AttachmentIndex.references(in: $0) }
        guard !found.isEmpty else { return }
        let insert = try statement(AttachmentIndex.insertSQL)
        for reference in found { try AttachmentIndex.add(reference, collection: scope.collection, source: source, id: id, with: insert) }
    }

    /// Forgets the references of row `id` of `source`.
    func unindexReferences(_ source: AttachmentIndex.Source, id: String) throws {
        let delete = try statement("DELETE FROM attachment_refs WHERE collection = \(scope.literal) AND source = ? AND id = ?")
        try delete.bind(1, source.rawValue)
        try delete.bind(2, id)
        try delete.run()
    }

    /// Forgets every reference of `source` in this scope (a full body replaces the records;
    /// nil: every source, a partition leaving its view).
    func unindexAllReferences(_ source: AttachmentIndex.Source?) throws {
        try db.execute("DELETE FROM attachment_refs WHERE collection = \(scope.literal)\(source.map { " AND source = \($0.rawValue)" } ?? "")")
    }

    /// Indexes every record of this scope (after a bundled replica's rows were copied in:
    /// O(records), like the copy itself).
    func indexAllRecords() throws {
        let rows = try db.prepare("SELECT id, body FROM records WHERE \(scope.condition())")
        let insert = try statement(AttachmentIndex.insertSQL)
        while try rows.step() {
            let found = rows.withBlob(1) { AttachmentIndex.references(in: $0) }
            for reference in found { try AttachmentIndex.add(reference, collection: scope.collection, source: .record, id: rows.string(0), with: insert) }
        }
    }

    // MARK: - Reading it

    /// Whether this file has the index: not a bundled replica of an older release read in
    /// place (which is then scanned, as before: it changes only once copied and migrated).
    var hasAttachmentIndex: Bool { (try? AttachmentIndex.exists(in: db)) ?? false }

    /// References that count: every local value's and queued write's, and a server record's
    /// unless a local value of the same record hides it (the app sees that one instead).
    private var visibleReference: String {
        "a.collection = \(scope.literal) AND (a.source != 0 OR NOT EXISTS (SELECT 1 FROM overlay o WHERE o.collection = a.collection AND o.id = a.id))"
    }

    /// The reference the records as the app sees them (queued writes included) make to
    /// `sha256`, or nil. O(log n): one probe of the hash index.
    func referencedAttachment(_ sha256: String) throws -> AttachmentReference? {
        guard hasAttachmentIndex else { return try scannedReferences()[sha256] }
        let lookup = try statement("SELECT size, type FROM attachment_refs a WHERE a.sha256 = ? AND \(visibleReference) LIMIT 1")
        try lookup.bind(1, sha256)
        guard try lookup.step() else { return nil }
        defer { lookup.reset() }
        return try? AttachmentReference(sha256: sha256, size: lookup.uint64(0), type: lookup.string(1))
    }

    /// The attachments the records as the app sees them (queued writes included) refer to:
    /// O(references), read from the index.
    func referencedAttachments() throws -> [String: AttachmentReference] {
        guard hasAttachmentIndex else { return try scannedReferences() }
        var found: [String: AttachmentReference] = [:]
        let rows = try db.prepare("SELECT sha256, size, type FROM attachment_refs a WHERE \(visibleReference)")
        while try rows.step() {
            let sha256 = rows.string(0)
            guard found[sha256] == nil, let reference = try? AttachmentReference(sha256: sha256, size: rows.uint64(1), type: rows.string(2)) else { continue }
            found[sha256] = reference
        }
        return found
    }

    /// The references found by reading every record: only for a bundled replica of an older
    /// release read in place (no index in it, and none can be added to a read-only file).
    private func scannedReferences() throws -> [String: AttachmentReference] {
        var found: [String: AttachmentReference] = [:]
        try forEachRecord { bytes in
            for reference in AttachmentIndex.references(in: bytes) { found[reference.sha256] = reference }
        }
        return found
    }

    /// The hashes whose references changed since the attachments were last settled, and the
    /// last change seen (for ``consumeAttachmentChanges(through:keeping:)``). O(changes).
    func attachmentChanges() throws -> (hashes: Set<String>, through: Int64?) {
        guard hasAttachmentIndex else { return ([], nil) }
        let rows = try statement("SELECT n, sha256 FROM attachment_changes WHERE collection = \(scope.literal) ORDER BY n")
        var hashes = Set<String>()
        var through: Int64?
        while try rows.step() {
            through = rows.int64(0)
            hashes.insert(rows.string(1))
        }
        return (hashes, through)
    }

    /// Forgets the changes up to `through` — they are settled — except `keeping`, which the
    /// next sync looks at again (a download that failed or was postponed). Nothing is
    /// written to a bundled replica read in place (that would copy it): it changes nothing.
    func consumeAttachmentChanges(through: Int64?, keeping: Set<String>) throws {
        guard borrowed == nil, through != nil || !keeping.isEmpty else { return }
        try writeTransaction {
            if let through {
                let delete = try statement("DELETE FROM attachment_changes WHERE collection = \(scope.literal) AND n <= ?")
                try delete.bind(1, through)
                try delete.run()
            }
            let insert = try statement("INSERT INTO attachment_changes(collection, sha256) VALUES (\(scope.literal), ?)")
            for sha256 in keeping.sorted() {
                try insert.bind(1, sha256)
                try insert.run()
            }
        }
    }
}

extension ReplicaStorage {
    /// Whether every reference was gone over in eager mode and only changes have been
    /// looked at since (kept in the replica: the next process need not go over them again).
    var settledEagerly: Bool { (try? value(for: "attachmentsSettled")) == "eager" }

    /// Remembers (or forgets) ``settledEagerly``; nothing is written when it holds already,
    /// or to a bundled replica read in place.
    func setSettledEagerly(_ settled: Bool) throws {
        guard borrowed == nil, settledEagerly != settled else { return }
        try writeTransaction { try setValue(settled ? "eager" : nil, for: "attachmentsSettled") }
    }
}

extension DeltaSnapReplica {
    /// What the replica's SQLite connection read since it opened or since
    /// ``resetReadStatistics()``: tests pin what a sync step costs by counting, not timing.
    ///
    /// ```swift
    /// await replica.resetReadStatistics()
    /// await replica.pull()
    /// #expect(await replica.readStatistics.fullScanSteps < 100)
    /// ```
    package var readStatistics: ReadStatistics { storage.db.readStatistics }

    /// Starts ``readStatistics`` from zero.
    package func resetReadStatistics() { storage.db.resetReadStatistics() }
}
