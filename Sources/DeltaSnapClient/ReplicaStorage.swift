import DeltaSnapCore
import DeltaSnapTrust
import DeltaSnapSQLite
import Foundation

/// The replica's SQLite file: the records and the ``ReplicaState``, changed together in
/// one transaction so a crash leaves the old state or the new one.
///
/// `records` is the last *verified server state* and nothing else: the checksum of a pull is
/// checked against it alone. Local writes live apart, in `pending` (the queue, in write
/// order) and `overlay` (each written record's local value: the server's value with its
/// pending writes replayed on top, `NULL` when they delete it). Reads take the overlay first.
final class ReplicaStorage {
    /// The connection; replaced once when a borrowed bundled replica is adopted.
    private(set) var db: SQLiteConnection
    /// A bundled replica read in place until the first write, and the path it is then
    /// copied to: a first start costs an open, whatever the dataset's size.
    private(set) var borrowed: (source: String, destination: String)?

    /// The replica's own path (nil while a bundle is borrowed and not yet copied).
    private(set) var path: String?
    /// The rows this storage works on: `""` for a one-collection replica, a partition's
    /// path in a view's file (changed only by ``ReplicaStorage/withScope(_:_:)``).
    fileprivate(set) var scope: ReplicaScope
    /// The live queries of this replica, told what each committed transaction changed.
    let observers = ReplicaObservers()
    /// What the write transaction under way changed, noted only while someone observes.
    private var changes: ReplicaChanges?
    private var transactionDepth = 0

    init(path: String, scope collection: String = "") throws {
        db = try Self.openWritable(path)
        scope = try ReplicaScope.of(collection, in: db)
        self.path = path
        // Bookkeeping a crash left beside a just-installed copy of its bundle.
        if FileManager.default.fileExists(atPath: SyncBookkeeping.path(for: path)) { try adoptBookkeeping(bundleToken: nil) }
    }

    /// The replica at `path` — or, while no data change has copied it there, the bundled
    /// replica `bundle`, read in place (a gzip snapshot is no replica: it is never borrowed).
    /// `scope`: one partition of a view's file (never read from a bundle).
    static func opening(_ path: String, bundledReplica bundle: String?, scope: String = "") throws -> ReplicaStorage {
        if scope.isEmpty, let bundle, BundledReplica.isReplica(bundle), !FileManager.default.fileExists(atPath: path) {
            return try ReplicaStorage(borrowing: bundle, copyingTo: path)
        }
        return try ReplicaStorage(path: path, scope: scope)
    }

    /// Reads the bundled replica `source` in place (read-only: an app bundle is); the first
    /// write transaction copies it to `destination` and goes on there.
    init(borrowing source: String, copyingTo destination: String) throws {
        db = try SQLiteConnection(path: source, readOnly: true, create: false)
        scope = try ReplicaScope.of("", in: db)
        borrowed = (source, destination)
        path = nil
    }

    /// Opens the replica read-write in WAL mode, creating its schema. The page cache is 8 MiB
    /// (SQLite's default is 2): a full body is applied in one transaction, and with the
    /// default cache its B-tree pages spill to the WAL and are written again; 8 MiB made a
    /// 1M-record apply ~12 % faster for ~7 MB of memory (docs/BENCHMARKS.md).
    private static func openWritable(_ path: String) throws -> SQLiteConnection {
        let db = try SQLiteConnection(path: path)
        try db.execute("""
            PRAGMA journal_mode=WAL;
            PRAGMA synchronous=NORMAL;
            PRAGMA cache_size=-8192;
            """ + ReplicaScope.schema)
        // Replicas from before conflict copies lack `pending.base`, those from before views
        // the `collection` columns.
        try ReplicaScope.migrate(db)
        // Replicas from before the file-reference index get it, built once.
        try AttachmentIndex.migrate(db)
        // A view's sync asks which partitions hold data (`key = 'token'`): by this index it
        // reads those rows, not every partition's bookkeeping.
        try db.execute("CREATE INDEX IF NOT EXISTS state_by_key ON state(key, collection)")
        return db
    }

    /// Runs `body` in one write transaction — every change to the replica goes through
    /// here — after adopting a borrowed bundled replica. Once it commits, the live queries
    /// hear what it changed (``noteChanged(_:)``), before this returns.
    func writeTransaction<T>(_ body: () throws -> T) throws -> T {
        try adoptIfBorrowed()
        let outermost = transactionDepth == 0
        if outermost { changes = observers.isObserving ? ReplicaChanges() : nil }
        transactionDepth += 1
        let result: T
        do {
            result = try db.transaction(.immediate, body)
            transactionDepth -= 1
        } catch {
            transactionDepth -= 1
            if outermost { changes = nil }
            throw error
        }
        if outermost, let committed = changes {
            changes = nil
            if !committed.isEmpty { observers.deliver(committed, from: self) }
        }
        return result
    }

    /// Record `id` may look different to the app once the transaction under way commits.
    func noteChanged(_ id: String) { changes?.insert(id) }

    /// Any record may: a full body, a bundle loaded, a partition dropped.
    func noteEverythingChanged() { changes?.insertEverything() }

    /// Whether changes are noted (someone observes): work done only to note them is skipped otherwise.
    var isNotingChanges: Bool { changes != nil }

    /// Copies the borrowed bundled replica to its own path and reopens it there — or, when
    /// another process (a second app process, an extension, `deltasnap local`) made the
    /// replica meanwhile, goes on in that one: an existing replica is never replaced.
    private func adoptIfBorrowed() throws {
        guard let (source, destination) = borrowed else { return }
        let bundleToken = try Self.stateValues(in: db, scope: scope)["token"]
        statements.removeAll()
        db = try SQLiteConnection(path: ":memory:")
        // One adopter at a time: the check for an existing replica and the install are one step.
        let lock = try FileLock(path: destination + "-adopt.lock")
        defer { lock.unlock() }
        if !FileManager.default.fileExists(atPath: destination) { try Self.install(copyOf: source, at: destination) }
        db = try Self.openWritable(destination)
        statements = StatementCache(db)
        scope = try ReplicaScope.of(scope.collection, in: db)
        borrowed = nil
        path = destination
        // An empty replica someone created at this path gets the bundle's rows (its queued
        // writes stay); one that already holds data is kept as it is.
        if try Self.stateValues(in: db, scope: scope)["token"] == nil { try load(fromReplica: source) }
        try adoptBookkeeping(bundleToken: bundleToken)
    }

    /// Installs a copy (a clone where the file system can: APFS, Btrfs, XFS — O(1) on a
    /// phone) of `source` at `destination`, which does not exist, atomically.
    private static func install(copyOf source: String, at destination: String) throws {
        let files = FileManager.default
        let temporary = destination + ".adopting"
        // A -wal left by an earlier replica at this path must never be replayed into the copy.
        for stale in [temporary, destination + "-wal", destination + "-shm"] where files.fileExists(atPath: stale) {
            try files.removeItem(atPath: stale)
        }
        try FileClone.copy(source, to: temporary)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: temporary))
        try handle.synchronize()
        try handle.close()
        // link(2), not rename(2): it fails rather than replace a replica that appeared meanwhile.
        defer { unlink(temporary) }
        guard link(temporary, destination) == 0 || errno == EEXIST else {
            throw SQLiteError(code: -1, message: "\(destination): cannot install the bundled replica (errno \(errno))")
        }
    }

    /// Moves the bookkeeping kept beside the bundle (``SyncBookkeeping``) into this replica
    /// when it still holds that bundle's state, and removes the side file. Also run on open:
    /// a crash between installing the copy and this step leaves the file behind.
    /// `bundleToken`: the bundle's token when known (nil on open: the replica's own token).
    func adoptBookkeeping(bundleToken: String?) throws {
        guard let path = self.path else { return }
        // Only onto the bundle's own state: its rows include the validators and the token.
        guard let held = try Self.stateValues(in: db, scope: scope)["token"], held == bundleToken ?? held,
              let bookkeeping = try SyncBookkeeping.openIfCurrent(destination: path, bundleToken: held)
        else { return }
        let rows = try bookkeeping.values()
        try db.transaction(.immediate) { try write(rows) }
        SyncBookkeeping.remove(for: path)
    }

    /// Loads the records and verified state of the bundled replica `source` into this
    /// replica, which holds no server data yet, in one transaction. Rows, not the file: a
    /// replica that exists already may hold queued local writes, which stay and are
    /// replayed over the loaded records.
    func load(fromReplica source: String) throws {
        do {
            let attach = try db.prepare("ATTACH DATABASE ? AS bundle")
            try attach.bind(1, source)
            try attach.run()
        }
        defer { try? db.execute("DETACH DATABASE bundle") }
        try writeTransaction {
            noteEverythingChanged()
            try unindexAllReferences(.record)
            // A bundle holds one collection, in whichever layout it was baked.
            try db.execute("""
                DELETE FROM records WHERE \(scope.condition());
                INSERT INTO records(collection, id, hash, body) SELECT \(scope.literal), id, hash, body FROM bundle.records;
                INSERT OR REPLACE INTO state(collection, key, value) SELECT \(scope.literal), key, value FROM bundle.state
                    WHERE key IN ('etag', 'lastModified', 'token', 'checksum', 'count');
                """)
            try indexAllRecords()
            try settleAfterPull(droppingAcknowledgedThrough: nil)
        }
    }

    /// Statements prepared once per connection: local writes and reads are hot paths.
    private lazy var statements = StatementCache(db)

    func statement(_ sql: String) throws -> SQLiteStatement {
        try statements(sql)
    }

    // MARK: - State

    func loadState() throws -> ReplicaState {
        var values = try Self.stateValues(in: db, scope: scope)
        if let (_, destination) = borrowed,
           let bookkeeping = try SyncBookkeeping.openIfCurrent(destination: destination, bundleToken: values["token"]) {
            for (key, value) in try bookkeeping.values() { values[key] = value }
        }
        return Self.state(from: values)
    }

    static func stateValues(in db: SQLiteConnection, scope: ReplicaScope) throws -> [String: String] {
        let statement = try db.prepare("SELECT key, value FROM state WHERE \(scope.condition())")
        var values: [String: String] = [:]
        while try statement.step() { values[statement.string(0)] = statement.string(1) }
        return values
    }

    private static func state(from values: [String: String]) -> ReplicaState {
        func date(_ key: String) -> Date? { values[key].flatMap(Double.init).map(Date.init(timeIntervalSince1970:)) }
        return ReplicaState(
            etag: values["etag"], lastModified: values["lastModified"], token: values["token"],
            checksum: values["checksum"].flatMap(StateChecksum.init) ?? .empty,
            count: values["count"].flatMap(Int.init) ?? 0,
            lastSuccessfulSync: date("lastSuccessfulSync"), lastError: values["lastError"],
            failingSince: date("failingSince"), consecutiveFailures: values["consecutiveFailures"].flatMap(Int.init) ?? 0,
            notBefore: date("notBefore"),
            digest: values["digest"].flatMap { Data(base64Encoded: $0) }.flatMap { StateDigest(bytes: $0) },
            indexSequence: values["indexSequence"].flatMap { UInt64($0) }, indexExpires: date("indexExpires"),
            serverNotBefore: date("serverNotBefore"), collection: values["collection"], server: values["server"])
    }

    /// `state` as rows of the state table; nil removes a row.
    static func rows(of state: ReplicaState) -> [String: String?] {
        func text(_ date: Date?) -> String? { date.map { String($0.timeIntervalSince1970) } }
        let values: [String: String?] = [
            "etag": state.etag, "lastModified": state.lastModified, "token": state.token,
            "checksum": state.checksum.description, "count": String(state.count),
            "lastSuccessfulSync": text(state.lastSuccessfulSync), "lastError": state.lastError,
            "failingSince": text(state.failingSince), "consecutiveFailures": String(state.consecutiveFailures),
            "notBefore": text(state.notBefore),
            "digest": state.digest.map { Data($0.bytes).base64EncodedString() },
            "indexSequence": state.indexSequence.map { String($0) }, "indexExpires": text(state.indexExpires),
            "serverNotBefore": text(state.serverNotBefore),
        ]
        // The binding is only ever set, never cleared (a bundled replica's `collection` too).
        let binding: [String: String?] = ["collection": state.collection, "server": state.server]
        return values.merging(binding.filter { $0.value != nil }, uniquingKeysWith: { $1 })
    }

    /// Writes `state` (inside the caller's transaction when there is one).
    func save(_ state: ReplicaState) throws {
        try write(Self.rows(of: state))
    }

    /// Upserts `rows` into the state table (nil deletes), in the caller's transaction.
    func write(_ rows: [String: String?]) throws {
        for (key, value) in rows { try setValue(value, for: key) }
    }

    /// Stores sync bookkeeping that changes no data (a `304`, a failure, a wait the server
    /// asked for, the binding): in the replica, or — while a bundled replica is read in
    /// place — in its small side file, so no such write copies the bundle.
    func saveBookkeeping(_ state: ReplicaState) throws {
        guard let (_, destination) = borrowed else {
            try writeTransaction { try save(state) }
            return
        }
        try SyncBookkeeping.open(destination: destination, bundleToken: try Self.stateValues(in: db, scope: scope)["token"]).write(Self.rows(of: state))
    }

    // MARK: - Reads

    /// Record `id` as the app sees it: its local value when it has pending writes, else the
    /// server's.
    func record(id: String) throws -> [UInt8]? {
        let local = try statement("SELECT body FROM overlay WHERE \(scope.condition()) AND id = ?")
        try local.bind(1, id)
        if try local.step() {
            defer { local.reset() }
            return local.isNull(0) ? nil : local.blob(0)
        }
        return try serverRecord(id: id)
    }

    /// Record `id` in the last verified server state.
    func serverRecord(id: String) throws -> [UInt8]? {
        let statement = try statement("SELECT body FROM records WHERE \(scope.condition()) AND id = ?")
        try statement.bind(1, id)
        guard try statement.step() else { return nil }
        defer { statement.reset() }
        return statement.blob(0)
    }

    /// Every record as the app sees it, sorted by id.
    func forEachRecord(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard try hasOverlay() else { return try forEachServerRecord(body) }
        let statement = try db.prepare("""
            SELECT r.id AS id, coalesce(o.body, r.body) AS body FROM records r LEFT JOIN overlay o ON \(scope.sameRecord("o", "r"))
            WHERE \(scope.condition("r")) AND (o.id IS NULL OR o.body IS NOT NULL)
            UNION ALL
            SELECT o.id AS id, o.body AS body FROM overlay o
            WHERE \(scope.condition("o")) AND o.body IS NOT NULL AND NOT EXISTS (SELECT 1 FROM records r WHERE \(scope.sameRecord("r", "o")))
            ORDER BY id
            """)
        while try statement.step() { try statement.withBlob(1, body) }
    }

    /// Every record of the last verified server state, sorted by id.
    func forEachServerRecord(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let statement = try db.prepare("SELECT body FROM records WHERE \(scope.condition()) ORDER BY id")
        while try statement.step() { try statement.withBlob(0, body) }
    }

    func hasOverlay() throws -> Bool {
        try db.scalarInt("SELECT EXISTS(SELECT 1 FROM overlay WHERE \(scope.condition()))") == 1
    }

    /// Visible records as the app sees them, from the verified count and the overlay.
    func localCount(serverCount: Int) throws -> Int {
        guard try hasOverlay() else { return serverCount }
        let o = scope.condition("o")
        let same = scope.sameRecord("r", "o")
        let added = try db.scalarInt("SELECT count(*) FROM overlay o WHERE \(o) AND o.body IS NOT NULL AND NOT EXISTS (SELECT 1 FROM records r WHERE \(same))") ?? 0
        let removed = try db.scalarInt("SELECT count(*) FROM overlay o WHERE \(o) AND o.body IS NULL AND EXISTS (SELECT 1 FROM records r WHERE \(same))") ?? 0
        return serverCount + Int(added) - Int(removed)
    }

    /// The state digest of the verified server state recomputed from every record (O(n)).
    func recomputedDigest(collection: String) throws -> StateDigest {
        var digest = StateDigest.empty
        let statement = try db.prepare("SELECT id, body FROM records WHERE \(scope.condition())")
        while try statement.step() {
            let id = statement.string(0)
            statement.withBlob(1) { digest.add(collection: collection, id: id, canonical: $0) }
        }
        return digest
    }

    /// Count and checksum of the verified server state recomputed from every record (O(n)).
    func recomputed() throws -> (count: Int, checksum: StateChecksum) {
        var checksum = StateChecksum.empty
        var count = 0
        try forEachServerRecord { bytes in
            checksum.add(hash: XXH64.hash(bytes))
            count += 1
        }
        return (count, checksum)
    }
}

extension ReplicaStorage {
    /// Runs `body` on the rows of `other` (statements are cached per SQL text, which names its scope).
    func withScope<T>(_ other: ReplicaScope, _ body: () throws -> T) rethrows -> T {
        let own = scope
        scope = other
        defer { scope = own }
        return try body()
    }
}
