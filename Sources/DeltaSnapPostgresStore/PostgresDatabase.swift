import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import Logging
import PostgresNIO

/// The connection-level store on a PostgreSQL server (``PostgresCollectionStore`` is the
/// public face): the same collections, versions, checksums and state
/// digests as the SQLite ``DeltaSnapSQLiteStore/SQLiteDatabase``, so exports and bakes are byte-identical.
///
/// A collection's next version is assigned inside the committing transaction while its row
/// in `deltasnap_collections` is locked (`SELECT … FOR UPDATE`), so writers through any
/// number of connections or `serve` instances queue, and a reader never sees version v+1
/// before v. Records arrive by `COPY` into a temporary table and are merged by one
/// statement, so an import of a million records is a handful of round trips.
///
/// ```swift
/// let store = try await PostgresDatabase.connect("postgres://deltasnap@127.0.0.1:5432/app")
/// let stream = RecordStream(source: try ChunkSources.file(at: "countries.ndjson"), name: "countries.ndjson")
/// let result = try await store.importRecords(from: stream, into: "countries")
/// print(result.token!)   // 5f3c9a0e12ab34cd.1
/// await store.close()
/// ```
final class PostgresDatabase: Sendable {
    /// Version of the `deltasnap_*` tables this release creates and reads; recorded in
    /// `deltasnap_schema`, so a later release can migrate step by step.
    package static let schemaVersion = 9

    /// The channel every commit notifies (payload `NAME VERSION`), delivered at commit.
    package static let notificationChannel = "deltasnap_heads"

    package let url: PostgresURL
    package let configuration: StoreConfiguration
    let pool: PostgresConnectionPool
    let logger: Logger

    private init(url: PostgresURL, configuration: StoreConfiguration, logger: Logger) throws {
        self.url = url
        self.configuration = configuration
        self.logger = logger
        pool = try PostgresConnectionPool(url: url, logger: logger)
    }

    /// Connects and creates (or checks) the schema. `migrate: false` is for a read replica,
    /// which cannot be written to (the primary creates the schema).
    package static func connect(
        _ text: String, configuration: StoreConfiguration = StoreConfiguration(), migrate: Bool = true,
        logger: Logger = Logger(label: "deltasnap.postgres")
    ) async throws -> PostgresDatabase {
        let store = try PostgresDatabase(url: try PostgresURL(text), configuration: configuration, logger: logger)
        do {
            if migrate {
                try await store.migrate()
            } else {
                _ = try await store.pool.withConnection { try await $0.checkedQuery("SELECT 1", logger: logger) }
            }
        } catch {
            await store.close()
            throw error
        }
        return store
    }

    package func close() async {
        await pool.close()
    }

    // MARK: - Schema

    private func migrate() async throws {
        try await transaction { connection in
            // One migrator at a time, whichever instance starts first.
            try await connection.checkedQuery("SELECT pg_advisory_xact_lock(7226583105)", logger: logger)
            try await connection.checkedQuery("CREATE TABLE IF NOT EXISTS deltasnap_schema(version INTEGER NOT NULL)", logger: logger)
            var found = 0
            for try await version in try await connection.checkedQuery("SELECT version FROM deltasnap_schema", logger: logger).decode(Int.self) {
                found = max(found, version)
            }
            guard found <= Self.schemaVersion else { throw StoreError.newerSchema(found: found, supported: Self.schemaVersion) }
            // Each step once, in order: a store made by an older release is brought forward.
            for (version, statements) in [(1, Self.schemaV1), (2, Self.schemaV2), (3, Self.schemaV3), (4, Self.schemaV4), (5, Self.schemaV5), (6, Self.schemaV6), (7, Self.schemaV7), (8, Self.schemaV8), (9, Self.schemaV9)] where found < version {
                for statement in statements { try await connection.checkedQuery(PostgresQuery(unsafeSQL: statement), logger: logger) }
                try await connection.checkedQuery("INSERT INTO deltasnap_schema(version) VALUES (\(version))", logger: logger)
            }
        }
    }

    /// How far each follower's source ran ahead of it, as it last measured (as SQLite's v8).
    private static let schemaV8 = [
        "ALTER TABLE deltasnap_source_positions ADD COLUMN lag_bytes BIGINT, ADD COLUMN lag_at BIGINT",
    ]

    /// Where each source follower stands, written with the versions it produced (as SQLite's v7).
    private static let schemaV7 = [
        "CREATE TABLE deltasnap_source_positions(follower TEXT PRIMARY KEY, position TEXT NOT NULL, recorded_at BIGINT NOT NULL)",
    ]

    /// The same tables as the SQLite store's, with a `deltasnap_` prefix so they can live in
    /// an application's own database. Ids sort byte-wise (`COLLATE "C"`), as SQLite's do.
    private static let schemaV1 = [
        """
        CREATE TABLE deltasnap_collections(
            cid BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE, epoch TEXT NOT NULL, head BIGINT NOT NULL,
            checksum BIGINT NOT NULL, visible BIGINT NOT NULL, floor BIGINT NOT NULL DEFAULT 0, digest BYTEA)
        """,
        """
        CREATE TABLE deltasnap_records(
            cid BIGINT NOT NULL, id TEXT COLLATE "C" NOT NULL, version BIGINT NOT NULL, hidden BOOLEAN NOT NULL,
            hash BIGINT NOT NULL, body BYTEA NOT NULL, PRIMARY KEY(cid, id))
        """,
        "CREATE INDEX deltasnap_records_by_version ON deltasnap_records(cid, version)",
        """
        CREATE TABLE deltasnap_versions(
            cid BIGINT NOT NULL, version BIGINT NOT NULL, committed_at BIGINT NOT NULL, PRIMARY KEY(cid, version))
        """,
        "CREATE TABLE deltasnap_publication(id INTEGER PRIMARY KEY CHECK (id = 1), sequence BIGINT NOT NULL)",
    ]

    /// Whether a push committed the version its results name, as SQLite's schema v4.
    private static let schemaV3 = [
        "ALTER TABLE deltasnap_push_results ADD COLUMN committed BOOLEAN NOT NULL DEFAULT TRUE",
    ]

    /// The publication sequence of each collection's (and partition's) last change, as
    /// SQLite's schema v5: a watcher reads what changed since it last looked.
    private static let schemaV4 = [
        "ALTER TABLE deltasnap_collections ADD COLUMN published BIGINT NOT NULL DEFAULT 0",
        "UPDATE deltasnap_collections SET published = coalesce((SELECT sequence FROM deltasnap_publication WHERE id = 1), 0)",
        "CREATE INDEX deltasnap_collections_by_published ON deltasnap_collections(published)",
    ]

    /// Two-way sync, as SQLite's schema v2: each client's last write number, recent push
    /// results (a retried batch gets the same answer) and the values writes replaced.
    private static let schemaV2 = [
        """
        CREATE TABLE deltasnap_push_clients(
            collection TEXT NOT NULL, client TEXT NOT NULL, last_seq BIGINT NOT NULL, PRIMARY KEY(collection, client))
        """,
        """
        CREATE TABLE deltasnap_push_results(
            collection TEXT NOT NULL, client TEXT NOT NULL, seq BIGINT NOT NULL, version BIGINT, error TEXT, message TEXT,
            at BIGINT NOT NULL, PRIMARY KEY(collection, client, seq))
        """,
        "CREATE INDEX deltasnap_push_results_by_time ON deltasnap_push_results(collection, at)",
        """
        CREATE TABLE deltasnap_history(
            collection TEXT NOT NULL, id TEXT COLLATE "C" NOT NULL, replaced_in BIGINT NOT NULL, version BIGINT NOT NULL,
            replaced_at BIGINT NOT NULL, client TEXT NOT NULL, body BYTEA NOT NULL, kept_at BIGINT NOT NULL,
            PRIMARY KEY(collection, id, replaced_in))
        """,
        "CREATE INDEX deltasnap_history_by_age ON deltasnap_history(collection, kept_at)",
    ]

    /// Runs `body` in one transaction on a pooled connection.
    func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await pool.withConnection { connection in
            do {
                return try await connection.inTransaction(logger: logger) { connection in try await body(connection) }
            } catch {
                throw Self.mapped(error)
            }
        }
    }

    /// Runs one statement on a pooled connection and collects its rows.
    func rows<Row: Sendable>(_ query: PostgresQuery, as type: Row.Type) async throws -> [Row] where Row: PostgresDecodable {
        try await pool.withConnection { connection in
            var out: [Row] = []
            for try await row in try await connection.checkedQuery(query, logger: logger).decode(Row.self) { out.append(row) }
            return out
        }
    }

    /// A one-line reason for `error`, without postgres-nio's multi-line dumps.
    static func reason(_ error: any Error) -> String {
        PostgresErrorReason.line(error)
    }

    /// Store errors as they are; a lost or refused connection as ``DeltaSnapStore/StoreError/unavailable(_:_:)``.
    static func mapped(_ error: any Error) -> any Error {
        if error is StoreError || error is ImportError || error is CancellationError { return error }
        if let error = error as? PSQLError {
            switch error.code {
            case .server:
                let state = error.serverInfo?[.sqlState] ?? ""
                // 08: connection exception, 57: operator intervention (shutdown, restart),
                // 53: insufficient resources (too many connections); 40001/40P01: a read
                // cancelled by a replica's replay, a deadlock; 25006: a write that reached a
                // standby (a failover in progress). All pass; the client retries.
                if state.hasPrefix("08") || state.hasPrefix("57") || state.hasPrefix("53") || ["40001", "40P01", "25006"].contains(state) {
                    return StoreError.unavailable("PostgreSQL at the database", PostgresDatabase.reason(error), underlying: error)
                }
                return StoreError.database("PostgreSQL: " + PostgresDatabase.reason(error), underlying: error)
            case .clientClosedConnection, .serverClosedConnection, .connectionError, .uncleanShutdown, .poolClosed:
                return StoreError.unavailable("PostgreSQL at the database", error.code.description, underlying: error)
            default:
                return StoreError.database("PostgreSQL: " + PostgresDatabase.reason(error), underlying: error)
            }
        }
        if error is ChannelError || error is IOError { return StoreError.unavailable("PostgreSQL at the database", String(describing: error), underlying: error) }
        return error
    }

    // MARK: - Reads

    /// Every collection's head but the partitions' (there may be millions: they are read one
    /// by one, ``head(of:)``), sorted by name (byte-wise).
    package func collections() async throws -> [CollectionHead] {
        try await pool.withConnection { try await Self.heads(on: $0, .unpartitioned, logger: logger) }
    }

    /// The visible record `id` of `collection` (nil: none).
    package func visibleRecord(_ id: String, in collection: String) async throws -> Record? {
        try await pool.withConnection { connection in
            for try await body in try await connection.checkedQuery("""
                SELECT r.body FROM deltasnap_records r JOIN deltasnap_collections c ON c.cid = r.cid
                WHERE c.name = \(collection) AND r.id = \(id) AND NOT r.hidden
                """, logger: logger).decode(ByteBuffer.self) { return try Record.parse(Array(buffer: body)) }
            return nil
        }
    }

    /// The partitions of `collection`, by the name index (`NAME/` up to `NAME0`: `0` follows `/`).
    package func partitionPaths(of collection: String) async throws -> [String] {
        try await pool.withConnection { connection in
            var paths: [String] = []
            for try await name in try await connection.checkedQuery(
                "SELECT name FROM deltasnap_collections WHERE name COLLATE \"C\" > \(collection + "/") AND name COLLATE \"C\" < \(collection + "0") ORDER BY name COLLATE \"C\"",
                logger: logger
            ).decode(String.self) { paths.append(name) }
            return paths
        }
    }

    /// Runs `body` holding the session advisory lock of `name` (`hashtextextended`), on a
    /// connection kept for it; released however `body` ends.
    package func exclusively<T: Sendable>(_ name: String, _ body: @Sendable () async throws -> T) async throws -> T {
        try await pool.withConnection { connection in
            try await connection.checkedQuery("SELECT pg_advisory_lock(hashtextextended(\(name), 7226583106))", logger: logger)
            do {
                let result = try await body()
                try await connection.checkedQuery("SELECT pg_advisory_unlock(hashtextextended(\(name), 7226583106))", logger: logger)
                return result
            } catch {
                _ = try? await connection.checkedQuery("SELECT pg_advisory_unlock(hashtextextended(\(name), 7226583106))", logger: logger)
                throw error
            }
        }
    }

    /// At most `limit` partitions of `collection` whose key starts with `prefix`.
    package func partitionPaths(of collection: String, keysStartingWith prefix: String, limit: Int) async throws -> [String] {
        let start = collection + "/" + prefix
        return try await pool.withConnection { connection in
            var paths: [String] = []
            for try await name in try await connection.checkedQuery(
                "SELECT name FROM deltasnap_collections WHERE name COLLATE \"C\" >= \(start) AND name COLLATE \"C\" < \(collection + "0") ORDER BY name COLLATE \"C\" LIMIT \(Int64(limit))",
                logger: logger
            ).decode(String.self) {
                // In name order the matches come first and together.
                guard name.hasPrefix(start) else { break }
                paths.append(name)
            }
            return paths
        }
    }

    /// The head of `name`, or nil when it was never committed.
    package func head(of name: String) async throws -> CollectionHead? {
        try await pool.withConnection { try await Self.heads(on: $0, .named(name), logger: logger) }.first
    }

    /// The heads of those of `names` that exist, in one query.
    package func heads(of names: [String]) async throws -> [CollectionHead] {
        guard !names.isEmpty else { return [] }
        return try await pool.withConnection { try await Self.heads(on: $0, .names(names), logger: logger) }
    }

    /// The heads changed under a publication sequence above `sequence`, and the highest
    /// such sequence (`sequence` when none changed): what a watcher reads to catch up.
    package func heads(publishedAfter sequence: UInt64) async throws -> (heads: [CollectionHead], through: UInt64) {
        try await pool.withConnection { connection in
            try await connection.inTransaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger) { connection in
                let heads = try await Self.heads(on: connection, .publishedAfter(Int64(clamping: sequence)), logger: logger)
                let through = try await Self.latestPublished(on: connection, logger: logger)
                return (heads, max(sequence, through))
            }
        }
    }

    /// The highest publication sequence any collection or partition changed under.
    package func latestPublished() async throws -> UInt64 {
        try await pool.withConnection { try await Self.latestPublished(on: $0, logger: logger) }
    }

    private static func latestPublished(on connection: PostgresConnection, logger: Logger) async throws -> UInt64 {
        var latest: Int64 = 0
        for try await value in try await connection.checkedQuery("SELECT coalesce(max(published), 0) FROM deltasnap_collections", logger: logger).decode(Int64.self) {
            latest = value
        }
        return UInt64(max(0, latest))
    }

    /// Which heads ``heads(on:_:logger:)`` reads.
    enum HeadSelection {
        case unpartitioned
        case named(String)
        case names([String])
        case publishedAfter(Int64)
    }

    static func heads(on connection: PostgresConnection, _ selection: HeadSelection, logger: Logger) async throws -> [CollectionHead] {
        var binds = PostgresBindings()
        let filter: String
        switch selection {
        case .unpartitioned: filter = "WHERE strpos(c.name, '/') = 0"
        case .named(let name):
            binds.append(name)
            filter = "WHERE c.name = $1"
        case .names(let names):
            binds.append(names)
            filter = "WHERE c.name = ANY($1)"
        case .publishedAfter(let sequence):
            binds.append(sequence)
            filter = "WHERE c.published > $1"
        }
        let sql = """
            SELECT c.name, c.epoch, c.head, c.checksum, c.visible, c.floor,
                   (SELECT v.committed_at FROM deltasnap_versions v WHERE v.cid = c.cid AND v.version = c.head)
            FROM deltasnap_collections c \(filter) ORDER BY c.name COLLATE "C"
            """
        var heads: [CollectionHead] = []
        let rows = try await connection.checkedQuery(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger)
        for try await (name, epoch, head, checksum, visible, floor, committedAt) in rows.decode((String, String, Int64, Int64, Int64, Int64, Int64?).self) {
            guard head > 0 else { continue }
            heads.append(CollectionHead(
                name: name, epoch: epoch, version: UInt64(head), checksum: StateChecksum(value: UInt64(bitPattern: checksum)),
                count: Int(visible), committedAt: committedAt ?? 0, floor: UInt64(floor)))
        }
        return heads
    }

    /// The state digest maintained by the writes; nil for an unknown collection.
    package func digest(of name: String) async throws -> StateDigest? {
        try await pool.withConnection { try await Self.digest(of: name, on: $0, logger: logger) }
    }

    static func digest(of name: String, on connection: PostgresConnection, logger: Logger) async throws -> StateDigest? {
        let rows = try await connection.checkedQuery("SELECT digest FROM deltasnap_collections WHERE name = \(name)", logger: logger)
        var found: StateDigest?
        for try await digest in rows.decode(ByteBuffer?.self) {
            found = digest.flatMap { StateDigest(bytes: $0.readableBytesView) }
        }
        return found
    }

    /// Raised by every commit to any collection, never lowered (see the signed index).
    package func publicationSequence() async throws -> UInt64 {
        try await pool.withConnection { try await Self.publicationSequence(on: $0, logger: logger) }
    }

    static func publicationSequence(on connection: PostgresConnection, logger: Logger) async throws -> UInt64 {
        var sequence: Int64 = 0
        for try await value in try await connection.checkedQuery("SELECT sequence FROM deltasnap_publication WHERE id = 1", logger: logger).decode(Int64.self) {
            sequence = value
        }
        return UInt64(sequence)
    }

    /// The first version of `collection` committed at or after `seconds` (for
    /// `If-Modified-Since`), or nil when none was.
    package func versions(of collection: String, limit: Int) async throws -> [(version: UInt64, committedAt: Int64)] {
        try await pool.withConnection { connection in
            var found: [(version: UInt64, committedAt: Int64)] = []
            for try await (version, committedAt) in try await connection.checkedQuery("""
                SELECT version, committed_at FROM deltasnap_versions
                WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) ORDER BY version DESC LIMIT \(Int64(limit))
                """, logger: logger).decode((Int64, Int64).self) {
                found.append((UInt64(version), committedAt))
            }
            return found
        }
    }

    package func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        let rows = try await rows("""
            SELECT min(version) FROM deltasnap_versions
            WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND committed_at >= \(seconds)
            """, as: Int64?.self)
        return rows.first.flatMap { $0 }.map { UInt64($0) }
    }

    /// What a signed index states about `names` (every collection when nil; names that do
    /// not exist are left out), read in one repeatable-read transaction so each digest
    /// belongs to the token next to it.
    /// With `known`, an entry is made only for a name whose head is not the one it gives
    /// (``CollectionStore/publishedState(of:confirming:statedAt:)``).
    package func publishedState(of names: [String]? = nil, confirming known: [String: PublishedHead] = [:]) async throws -> PublishedState {
        try await pool.withConnection { connection in
            try await connection.inTransaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger) { connection in
                var entries: [SignedIndex.Entry] = []
                var confirmed = Set<String>()
                let rows = try await connection.checkedQuery(PostgresQuery(
                    unsafeSQL: """
                        SELECT c.name, c.epoch, c.head, c.checksum, c.visible, c.floor,
                               (SELECT v.committed_at FROM deltasnap_versions v WHERE v.cid = c.cid AND v.version = c.head), c.digest
                        FROM deltasnap_collections c \(names == nil ? "" : "WHERE c.name = ANY($1)") ORDER BY c.name COLLATE "C"
                        """,
                    binds: names.map { var binds = PostgresBindings(); binds.append($0); return binds } ?? PostgresBindings()), logger: logger)
                for try await (name, epoch, version, checksum, visible, floor, committedAt, digest)
                    in rows.decode((String, String, Int64, Int64, Int64, Int64, Int64?, ByteBuffer?).self)
                {
                    guard version > 0 else { continue }
                    if known[name] == PublishedHead(epoch: epoch, version: UInt64(version), floor: UInt64(floor)) {
                        confirmed.insert(name)
                        continue
                    }
                    guard let digest = digest.flatMap({ StateDigest(bytes: $0.readableBytesView) }) else { continue }
                    let head = CollectionHead(
                        name: name, epoch: epoch, version: UInt64(version), checksum: StateChecksum(value: UInt64(bitPattern: checksum)),
                        count: Int(visible), committedAt: committedAt ?? 0, floor: UInt64(floor))
                    entries.append(SignedIndex.Entry(head: head, digest: digest))
                }
                let sequence = try await Self.publicationSequence(on: connection, logger: logger)
                return PublishedState(sequence: sequence, entries: entries, confirmed: confirmed)
            }
        }
    }

    /// The state digest recomputed from every visible record (O(n)); tests compare it with
    /// the maintained one.
    package func recomputedDigest(of collection: String) async throws -> StateDigest {
        try await pool.withConnection { connection in
            var digest = StateDigest.empty
            let rows = try await connection.checkedQuery("""
                SELECT id, body FROM deltasnap_records
                WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND NOT hidden
                """, logger: logger)
            for try await (id, body) in rows.decode((String, ByteBuffer).self) {
                digest.add(collection: collection, id: id, canonical: Array(body.readableBytesView))
            }
            return digest
        }
    }

    /// Opens one read transaction on `collection`: its head, and a cursor over the visible
    /// records (`after` nil) or every record changed after that version, tombstones
    /// included. Rows stream from the server with back-pressure, so memory stays bounded
    /// for any collection size. The caller must ``PostgresRecordCursor/close()`` it.
    package func openRecords(in collection: String, after version: UInt64?) async throws -> PostgresRecordCursor {
        try await open(collection) { connection, head in
            try await Self.records(of: collection, after: version, head: head, on: connection, logger: logger)
        }
    }

    /// Up to `limit` visible records whose ids sort after `id` (nil: from the first), in id
    /// order, from one read transaction: a range of the primary key.
    package func openPage(of collection: String, after id: String?, limit: Int) async throws -> PostgresRecordCursor {
        try await open(collection) { connection, _ in
            let id = id ?? ""
            var count: Int64 = 0
            for try await value in try await connection.checkedQuery("""
                SELECT count(*) FROM (
                    SELECT 1 FROM deltasnap_records
                    WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND id > \(id) AND NOT hidden
                    LIMIT \(Int64(limit))) page
                """, logger: logger).decode(Int64.self) { count = value }
            let rows = try await connection.checkedQuery("""
                SELECT body FROM deltasnap_records
                WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND id > \(id) AND NOT hidden
                ORDER BY id LIMIT \(Int64(limit))
                """, logger: logger)
            return (Int(count), rows)
        }
    }

    /// A read transaction on a connection of its own, with `collection`'s head in it, and
    /// the records `select` queries in it: a cursor over them.
    private func open(
        _ collection: String, select: (PostgresConnection, CollectionHead) async throws -> (count: Int, rows: PostgresRowSequence)
    ) async throws -> PostgresRecordCursor {
        let connection = try await pool.checkout()
        do {
            try await connection.checkedQuery("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            guard let head = try await Self.heads(on: connection, .named(collection), logger: logger).first else {
                throw StoreError.unknownCollection(collection)
            }
            let (count, rows) = try await select(connection, head)
            return PostgresRecordCursor(head: head, count: count, rows: rows, connection: connection, pool: pool, logger: logger)
        } catch {
            await pool.discard(connection)
            throw Self.mapped(error)
        }
    }

    /// A full body's records (`version` nil) or a delta's, and how many.
    private static func records(
        of collection: String, after version: UInt64?, head: CollectionHead, on connection: PostgresConnection, logger: Logger
    ) async throws -> (count: Int, rows: PostgresRowSequence) {
        let count: Int
        let rows: PostgresRowSequence
        if let version {
            try await connection.checkedQuery(deltaSetting, logger: logger)
            var changed: Int64 = 0
            for try await value in try await connection.checkedQuery(deltaCount(of: collection, after: version), logger: logger).decode(Int64.self) {
                changed = value
            }
            count = Int(changed)
            let few = count <= max(fewChangedRecords, head.count / 8)
            rows = try await connection.checkedQuery(delta(of: collection, after: version, fewChanged: few), logger: logger)
        } else {
            count = head.count
            try await connection.checkedQuery(fullBodySetting, logger: logger)
            rows = try await connection.checkedQuery(fullBody(of: collection), logger: logger)
        }
        return (count, rows)
    }

    /// How many records changed after `version`, tombstones included.
    static func deltaCount(of collection: String, after version: UInt64) -> PostgresQuery {
        """
        SELECT count(*) FROM deltasnap_records
        WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND version > \(Int64(version))
        """
    }

    /// A delta's rows — every record changed after `version`, tombstones included — in id
    /// order. `fewChanged`: they are a small share of the collection (counted first,
    /// ``deltaCount(of:after:)``), read from the version index and then sorted — the
    /// subquery (`OFFSET 0`) keeps the planner from reading the whole collection in key order
    /// instead, as it does when the statistics overestimate the share (see ``deltaSetting``).
    /// Otherwise the planner chooses, and reads the primary key in order rather than sort
    /// most of a collection.
    static func delta(of collection: String, after version: UInt64, fewChanged: Bool) -> PostgresQuery {
        let changed: PostgresQuery = """
            SELECT id, body FROM deltasnap_records
            WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND version > \(Int64(version))
            """
        var query = changed
        query.sql = fewChanged ? "SELECT body FROM (\(changed.sql) OFFSET 0) changed ORDER BY id" : "SELECT body FROM (\(changed.sql)) changed ORDER BY id"
        return query
    }

    /// Up to this many changed records a delta counts as few whatever the collection's size
    /// (beside an eighth of it): sorted in memory or a small spill.
    static let fewChangedRecords = 10_000

    /// What a delta's statements run under, in their read transaction: a delta reads the
    /// `(cid, version)` index, whatever the statistics say. They are the whole table's, and
    /// versions are numbered per collection: once another collection holds many records at
    /// versions above this one's base (a replace hid 1M records at version 2), the planner
    /// expects a large share of this collection to have changed and scans the whole table —
    /// every collection's records — for a 1-record delta (0.66 s at 10M records, 0.2–0.4 s
    /// at 2M), or compiles the plan (JIT, 20–40 ms) and starts parallel workers (~20 ms)
    /// for it. A delta of most of a collection still reads its primary key in order.
    static let deltaSetting: PostgresQuery = """
        SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true),
            set_config('max_parallel_workers_per_gather', '0', true)
        """

    /// A full body's rows, in id order.
    static func fullBody(of collection: String) -> PostgresQuery {
        """
        SELECT body FROM deltasnap_records
        WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND NOT hidden
        ORDER BY id
        """
    }

    /// What ``fullBody(of:)`` runs under, in its read transaction: no sort. The primary key
    /// already gives id order, but on a table whose statistics do not know the collection yet
    /// — right after its import, before autovacuum's `ANALYZE` — the planner estimated a few
    /// thousand rows and chose to fetch and sort them all before the first byte: 0.85 s at 1M
    /// records, an on-disk sort of gigabytes at 10M. The stream now starts at once, whatever
    /// the statistics say.
    static let fullBodySetting: PostgresQuery = "SET LOCAL enable_sort = off"

    /// The plan PostgreSQL makes now (`EXPLAIN`, one line a node) for a full body (`version`
    /// nil, ``fullBody(of:)``) or a delta (``delta(of:after:)``), under the setting the store
    /// reads it under (``fullBodySetting``, ``deltaSetting``) or without it: what the store's
    /// tests look at.
    func readPlan(of collection: String, after version: UInt64?, settled: Bool) async throws -> [String] {
        try await pool.withConnection { connection in
            try await connection.checkedQuery("BEGIN READ ONLY", logger: logger)
            var lines: [String] = []
            do {
                if settled { try await connection.checkedQuery(version == nil ? Self.fullBodySetting : Self.deltaSetting, logger: logger) }
                let queries = version.map { [Self.deltaCount(of: collection, after: $0), Self.delta(of: collection, after: $0, fewChanged: settled)] }
                    ?? [Self.fullBody(of: collection)]
                for var explain in queries {
                    explain.sql = "EXPLAIN " + explain.sql
                    for try await line in try await connection.checkedQuery(explain, logger: logger).decode(String.self) { lines.append(line) }
                }
            } catch {
                _ = try? await connection.checkedQuery("ROLLBACK", logger: logger)
                throw error
            }
            try await connection.checkedQuery("ROLLBACK", logger: logger)
            return lines
        }
    }

    // MARK: - Notifications

    /// Calls `onCommit(collection, version)` for every commit made anywhere, until the
    /// connection drops or the task is cancelled (then it throws; callers reconnect).
    /// `onListening` runs once the subscription is active, so nothing committed after it
    /// is missed.
    package func listenForCommits(onListening: () async -> Void, onCommit: (String, UInt64) async -> Void) async throws {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: pool.connectionConfiguration, id: 0, logger: logger)
        } catch {
            throw StoreError.unavailable("PostgreSQL at \(url)", PostgresDatabase.reason(error), underlying: error)
        }
        do {
            try await connection.listen(on: Self.notificationChannel) { notifications in
                await onListening()
                for try await notification in notifications {
                    let parts = notification.payload.split(separator: " ")
                    guard parts.count == 2, let version = UInt64(parts[1]) else { continue }
                    await onCommit(String(parts[0]), version)
                }
            }
            try? await connection.close()
            throw StoreError.unavailable("PostgreSQL at \(url)", "the notification stream ended")
        } catch {
            try? await connection.close()
            throw Self.mapped(error)
        }
    }
}

/// One read transaction's records, streamed (see ``PostgresDatabase/openRecords(in:after:)``).
final class PostgresRecordCursor: RecordSource, @unchecked Sendable {
    /// The collection's head in this transaction: the records belong to exactly it.
    package let head: CollectionHead
    /// How many records the cursor yields.
    package let count: Int
    private var iterator: PostgresRowSequence.AsyncIterator?
    private var connection: PostgresConnection?
    private let pool: PostgresConnectionPool
    private let logger: Logger
    private var finished = false

    init(head: CollectionHead, count: Int, rows: PostgresRowSequence, connection: PostgresConnection, pool: PostgresConnectionPool, logger: Logger) {
        self.head = head
        self.count = count
        iterator = rows.makeAsyncIterator()
        self.connection = connection
        self.pool = pool
        self.logger = logger
    }

    deinit {
        // Dropped without close() (a cancelled response): the connection's state is unknown.
        if let connection { Task { [pool] in await pool.discard(connection) } }
    }

    /// Calls `body` with the next record's canonical bytes; false when there are no more.
    package func next(_ body: (UnsafeRawBufferPointer) throws -> Void) async throws -> Bool {
        guard !finished, var iterator else { return false }
        let row: PostgresRow?
        do {
            row = try await iterator.next()
        } catch {
            throw PostgresDatabase.mapped(error)
        }
        self.iterator = iterator
        guard let row else {
            finished = true
            return false
        }
        var bytes = try row.decode(ByteBuffer.self)
        try bytes.readWithUnsafeReadableBytes { pointer in
            try body(pointer)
            return pointer.count
        }
        return true
    }

    /// Ends the transaction and returns the connection; one abandoned mid-stream is closed
    /// instead (its unread rows would otherwise follow the next query). Safe to call twice.
    package func close() async {
        guard let connection else { return }
        self.connection = nil
        iterator = nil
        if finished, (try? await connection.checkedQuery("COMMIT", logger: logger)) != nil {
            pool.checkin(connection)
        } else {
            await pool.discard(connection)
        }
    }
}
