import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapStore

/// The server-side source of truth: versioned collections of JSON records in one SQLite
/// file (WAL mode).
///
/// Every committed write creates exactly one new version of one collection, assigned inside
/// the write transaction (`BEGIN IMMEDIATE`), so commit order is version order and no reader
/// sees version v+1 without v. A `SQLiteDatabase` is one connection: open one per task or process.
///
/// ```swift
/// let store = try SQLiteDatabase(path: "deltasnap.sqlite")
/// let result = try store.write(to: "countries") { writer in
///     try writer.put(try Record(json: Array(#"{"id":"AD","name":"Andorra"}"#.utf8)))
/// }
/// print(result.token)   // 5f3c9a0e12ab34cd.1
/// ```
package final class SQLiteDatabase {
    package let path: String
    package let configuration: StoreConfiguration
    let db: SQLiteConnection
    /// Statements the writes reuse (a partitioned import opens a writer per partition).
    lazy var statements = StatementCache(db)
    /// The blobs records may refer to, beside the file.
    package let blobs: BlobDirectory

    static let schemaVersion: Int64 = 9

    package init(path: String, configuration: StoreConfiguration = StoreConfiguration(), readOnly: Bool = false) throws {
        if let epoch = configuration.epochForNewCollections, !ServerToken.isEpoch(epoch) {
            throw StoreError.invalidEpoch(epoch)
        }
        self.path = path
        self.configuration = configuration
        blobs = BlobDirectory(databasePath: path)
        db = try SQLiteConnection(path: path, readOnly: readOnly)
        try db.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA temp_store=FILE")
        if !readOnly { try migrate() }
    }

    /// Creates the schema on first use and upgrades an older one in place, one step per
    /// version, each in its own transaction.
    private func migrate() throws {
        let version = try db.scalarInt("PRAGMA user_version") ?? 0
        if version == Self.schemaVersion { return }
        guard version < Self.schemaVersion else {
            throw StoreError.notADeltaSnapStore(path: path, reason: "schema version \(version) is newer than this release's \(Self.schemaVersion)")
        }
        try db.transaction(.immediate) {
            // Re-read under the write lock: another process may have migrated meanwhile.
            let current = try db.scalarInt("PRAGMA user_version") ?? 0
            if current < 1 { try db.execute(Self.schemaV1) }
            if current < 2 { try db.execute(Self.schemaV2) }
            if current < 3 { try migrateToV3() }
            // Whether a push committed the version its results name (a batch that changed
            // nothing names the head, someone else's): conflict copies ask (§5.6).
            if current < 4 { try db.execute("ALTER TABLE push_results ADD COLUMN committed INTEGER NOT NULL DEFAULT 1") }
            // The publication sequence of each collection's (and partition's) last change, so
            // a watcher reads what changed since it last looked, not a million heads.
            if current < 5 {
                try db.execute("""
                    ALTER TABLE collections ADD COLUMN published INTEGER NOT NULL DEFAULT 0;
                    UPDATE collections SET published = coalesce((SELECT sequence FROM publication WHERE id = 1), 0);
                    CREATE INDEX IF NOT EXISTS collections_by_published ON collections(published);
                    """)
            }
            if current < 6 { try db.execute(Self.schemaV6) }
            // Where each source follower stands, written with the versions it produced.
            if current < 7 {
                try db.execute("CREATE TABLE IF NOT EXISTS source_positions(follower TEXT PRIMARY KEY, position TEXT NOT NULL, recorded_at INTEGER NOT NULL) WITHOUT ROWID")
            }
            // How far each follower's source ran ahead of it, as it last measured (the console's health).
            if current < 8 { try db.execute("ALTER TABLE source_positions ADD COLUMN lag_bytes INTEGER; ALTER TABLE source_positions ADD COLUMN lag_at INTEGER") }
            // Which scopes each blob was uploaded into: what a writer there may name (§12.2).
            // A scope whose records refer to a blob already proves it, so nothing is copied.
            if current < 9 {
                try db.execute("""
                    CREATE TABLE IF NOT EXISTS attachment_possession(collection TEXT NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY(collection, sha256)) WITHOUT ROWID;
                    CREATE INDEX IF NOT EXISTS attachment_possession_by_hash ON attachment_possession(sha256);
                    """)
            }
            try db.execute("PRAGMA user_version = \(Self.schemaVersion)")
        }
    }

    /// Collections, records and the version <-> commit-time map.
    private static let schemaV1 = """
        CREATE TABLE IF NOT EXISTS collections(
            cid INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            epoch TEXT NOT NULL,
            head INTEGER NOT NULL,
            checksum INTEGER NOT NULL,
            visible INTEGER NOT NULL,
            floor INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE IF NOT EXISTS records(
            cid INTEGER NOT NULL,
            id TEXT NOT NULL,
            version INTEGER NOT NULL,
            hidden INTEGER NOT NULL,
            hash INTEGER NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY(cid, id)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS records_by_version ON records(cid, version);
        CREATE TABLE IF NOT EXISTS versions(
            cid INTEGER NOT NULL,
            version INTEGER NOT NULL,
            committed_at INTEGER NOT NULL,
            PRIMARY KEY(cid, version)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS versions_by_time ON versions(cid, committed_at);
        """

    /// Attachments: which collections' (and partitions') records refer to which blob, with
    /// the media type the first such reference stated — who may read a blob, and what it is
    /// served as —, since when a blob no record refers to has been so (garbage collection),
    /// and the resumable uploads under way (their bytes are files beside the blobs).
    private static let schemaV6 = """
        CREATE TABLE IF NOT EXISTS attachment_refs(
            cid INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            type TEXT NOT NULL,
            PRIMARY KEY(cid, sha256)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS attachment_refs_by_hash ON attachment_refs(sha256);
        CREATE TABLE IF NOT EXISTS attachment_orphans(
            sha256 TEXT PRIMARY KEY,
            since INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS attachment_uploads(
            token TEXT PRIMARY KEY,
            sha256 TEXT NOT NULL,
            size INTEGER NOT NULL,
            type TEXT NOT NULL,
            collection TEXT NOT NULL,
            owner TEXT NOT NULL,
            received INTEGER NOT NULL,
            created_at INTEGER NOT NULL
        ) WITHOUT ROWID;
        """

    /// Two-way sync: the last write number processed per client (idempotency at a row per
    /// client), the results of recent pushes (so a retried batch gets the same answer), and
    /// the values writes replaced. Keyed by collection name, not `cid`, so a first push that
    /// creates nothing leaves no row pointing at a collection that was never committed.
    private static let schemaV2 = """
        CREATE TABLE IF NOT EXISTS push_clients(
            collection TEXT NOT NULL,
            client TEXT NOT NULL,
            last_seq INTEGER NOT NULL,
            PRIMARY KEY(collection, client)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS push_results(
            collection TEXT NOT NULL,
            client TEXT NOT NULL,
            seq INTEGER NOT NULL,
            version INTEGER,
            error TEXT,
            message TEXT,
            at INTEGER NOT NULL,
            PRIMARY KEY(collection, client, seq)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS push_results_by_time ON push_results(collection, at);
        CREATE TABLE IF NOT EXISTS history(
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            replaced_in INTEGER NOT NULL,
            version INTEGER NOT NULL,
            replaced_at INTEGER NOT NULL,
            client TEXT NOT NULL,
            body BLOB NOT NULL,
            kept_at INTEGER NOT NULL,
            PRIMARY KEY(collection, id, replaced_in)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS history_by_age ON history(collection, kept_at);
        """

    /// Signed data: each collection's ``StateDigest`` (maintained by every write like the
    /// checksum), and the publication sequence a signed index carries.
    private func migrateToV3() throws {
        if try db.scalarInt("SELECT count(*) FROM pragma_table_info('collections') WHERE name = 'digest'") == 0 {
            try db.execute("ALTER TABLE collections ADD COLUMN digest BLOB")
        }
        try db.execute("CREATE TABLE IF NOT EXISTS publication(id INTEGER PRIMARY KEY CHECK (id = 1), sequence INTEGER NOT NULL)")
        // Stores from before signing: compute each digest once, from every visible record.
        let names = try SQLiteReader(db: db).collections().map(\.name)
        let update = try db.prepare("UPDATE collections SET digest = ? WHERE name = ?")
        for name in names {
            let digest = try SQLiteReader(db: db).recomputedDigest(of: name)
            try update.bind(1, blob: digest.bytes)
            try update.bind(2, name)
            try update.run()
        }
        if !names.isEmpty {
            try db.execute("INSERT OR IGNORE INTO publication(id, sequence) VALUES (1, \(PublicationSequence.next(after: 0, at: configuration.commitTime(after: nil))))")
        }
    }

    // MARK: - Heads

    /// Every collection's head, sorted by name.
    package func collections() throws -> [CollectionHead] {
        try read { try $0.collections() }
    }

    /// The head of `name`, or `nil` when it does not exist.
    package func head(of name: String) throws -> CollectionHead? {
        try read { try $0.head(of: name) }
    }

    /// A number that changes whenever another connection commits to the file (SQLite's
    /// `PRAGMA data_version`): a cheap way to notice outside writes.
    package func dataVersion() throws -> Int64 {
        try db.scalarInt("PRAGMA data_version") ?? 0
    }

    /// Prepared statements of this store's connection not yet finalised (see
    /// `SQLiteConnection.liveStatementCount`).
    package var liveStatementCount: Int { db.liveStatementCount }

    // MARK: - Transactions

    /// Runs `body` in one read transaction: everything it reads comes from one consistent
    /// state of the store, whatever writers commit meanwhile (WAL snapshot isolation).
    package func read<T>(_ body: (SQLiteReader) throws -> T) throws -> T {
        try db.transaction(.deferred) {
            try body(SQLiteReader(db: db))
        }
    }

    /// Commits one new version of `collection` holding what `body` put, or nothing at all
    /// when nothing changed (no version is created) or when `body` throws (rolled back).
    /// The collection is created by its first commit.
    package func write(to collection: String, _ body: (CollectionWriter) throws -> Void) throws -> WriteResult {
        try db.transaction(.immediate) { try writeCollection(collection, body) }
    }

    /// ``write(to:_:)`` in the caller's transaction.
    func writeCollection(_ collection: String, _ body: (CollectionWriter) throws -> Void) throws -> WriteResult {
        try CollectionPath.validate(collection)
        let writer = try CollectionWriter(db: db, statements: statements, collection: collection, configuration: configuration, blobs: blobs)
        try body(writer)
        return try writer.commit()
    }

    /// Opens a read transaction that stays open until ``endRead()``: for a body streamed
    /// across suspension points. Prefer ``read(_:)`` when the work is synchronous.
    package func beginRead() throws -> SQLiteReader {
        try db.execute("BEGIN DEFERRED")
        return SQLiteReader(db: db)
    }

    /// Ends the transaction opened by ``beginRead()``.
    package func endRead() {
        try? db.execute("COMMIT")
    }

    /// Deletes tombstones of versions up to `version` and raises the collection's floor to
    /// it: a client holding a token below the floor may have missed a deleted tombstone, so
    /// it gets a full body from then on.
    @discardableResult
    package func compact(_ collection: String, throughVersion version: UInt64) throws -> Int {
        try db.transaction(.immediate) {
            guard let head = try SQLiteReader(db: db).head(of: collection) else { throw StoreError.unknownCollection(collection) }
            let target = min(version, head.version)
            let delete = try db.prepare("DELETE FROM records WHERE cid = (SELECT cid FROM collections WHERE name = ?) AND hidden = 1 AND version <= ?")
            try delete.bind(1, collection)
            try delete.bind(2, target)
            try delete.run()
            let removed = db.changes
            let update = try db.prepare("UPDATE collections SET floor = max(floor, ?) WHERE name = ?")
            try update.bind(1, target)
            try update.bind(2, collection)
            try update.run()
            // A raised floor is published (the signed index lists it): a new sequence, so two
            // indexes with one sequence always state the same thing (docs/PROTOCOL.md §8.1).
            if target > head.floor {
                try db.execute("UPDATE publication SET sequence = sequence + 1 WHERE id = 1")
                let published = try db.prepare("UPDATE collections SET published = (SELECT sequence FROM publication WHERE id = 1) WHERE name = ?")
                try published.bind(1, collection)
                try published.run()
            }
            return removed
        }
    }
}
