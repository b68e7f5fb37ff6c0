import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import Logging
import PostgresNIO

/// The store on a PostgreSQL server: the same collections, versions, checksums and state
/// digests as the SQLite ``DeltaSnapStore/Store``, so exports and bakes are byte-identical.
///
/// A collection's next version is assigned inside the committing transaction while its row
/// in `deltasnap_collections` is locked (`SELECT … FOR UPDATE`), so writers through any
/// number of connections or `serve` instances queue, and a reader never sees version v+1
/// before v. Records arrive by `COPY` into a temporary table and are merged by one
/// statement, so an import of a million records is a handful of round trips.
///
/// ```swift
/// let store = try await PostgresStore.connect("postgres://deltasnap@127.0.0.1:5432/app")
/// let stream = RecordStream(source: try ChunkSources.file(at: "countries.ndjson"), name: "countries.ndjson")
/// let result = try await store.importRecords(from: stream, into: "countries")
/// print(result.token!)   // 5f3c9a0e12ab34cd.1
/// await store.close()
/// ```
public final class PostgresStore: @unchecked Sendable {
    /// Version of the `deltasnap_*` tables this release creates and reads; recorded in
    /// `deltasnap_schema`, so a later release can migrate step by step.
    public static let schemaVersion = 1

    public let url: PostgresURL
    public let configuration: StoreConfiguration
    let connection: PostgresConnection
    let logger: Logger

    private init(url: PostgresURL, configuration: StoreConfiguration, connection: PostgresConnection, logger: Logger) {
        self.url = url
        self.configuration = configuration
        self.connection = connection
        self.logger = logger
    }

    /// Connects and creates (or checks) the schema.
    public static func connect(
        _ text: String, configuration: StoreConfiguration = StoreConfiguration(), logger: Logger = Logger(label: "deltasnap.postgres")
    ) async throws -> PostgresStore {
        let url = try PostgresURL(text)
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: url.configuration, id: 1, logger: logger)
        } catch {
            throw PostgresStoreError.unreachable(url.description, String(describing: error))
        }
        let store = PostgresStore(url: url, configuration: configuration, connection: connection, logger: logger)
        do {
            try await store.migrate()
        } catch {
            try? await connection.close()
            throw error
        }
        return store
    }

    public func close() async {
        try? await connection.close()
    }

    // MARK: - Schema

    private func migrate() async throws {
        try await transaction { connection in
            // One migrator at a time, whichever instance starts first.
            try await connection.query("SELECT pg_advisory_xact_lock(7226583105)", logger: logger)
            try await connection.query("CREATE TABLE IF NOT EXISTS deltasnap_schema(version INTEGER NOT NULL)", logger: logger)
            var found = 0
            for try await version in try await connection.query("SELECT version FROM deltasnap_schema", logger: logger).decode(Int.self) {
                found = max(found, version)
            }
            guard found <= Self.schemaVersion else { throw PostgresStoreError.newerSchema(found: found, supported: Self.schemaVersion) }
            if found < 1 {
                for statement in Self.schemaV1 { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
                try await connection.query("INSERT INTO deltasnap_schema(version) VALUES (1)", logger: logger)
            }
        }
    }

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

    /// Runs `body` in one transaction on this store's connection.
    func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await connection.withTransaction(logger: logger) { connection in try await body(connection) }
        } catch let error as PostgresTransactionError {
            if let closureError = error.closureError { throw Self.mapped(closureError) }
            throw PostgresStoreError.database(String(reflecting: error))
        } catch {
            throw Self.mapped(error)
        }
    }

    static func mapped(_ error: any Error) -> any Error {
        if error is PostgresStoreError || error is ImportError { return error }
        if let error = error as? PSQLError {
            return PostgresStoreError.database(error.serverInfo?[.message] ?? String(describing: error.code))
        }
        return error
    }

    // MARK: - Reads

    /// Every collection's head, sorted by name (byte-wise).
    public func collections() async throws -> [CollectionHead] {
        try await heads(where: "", nil)
    }

    /// The head of `name`, or nil when it was never committed.
    public func head(of name: String) async throws -> CollectionHead? {
        try await heads(where: "WHERE c.name = $1", name).first
    }

    private func heads(where condition: String, _ name: String?) async throws -> [CollectionHead] {
        var binds = PostgresBindings()
        if let name { binds.append(name) }
        let sql = """
            SELECT c.name, c.epoch, c.head, c.checksum, c.visible, c.floor,
                   (SELECT v.committed_at FROM deltasnap_versions v WHERE v.cid = c.cid AND v.version = c.head)
            FROM deltasnap_collections c \(condition) ORDER BY c.name COLLATE "C"
            """
        var heads: [CollectionHead] = []
        let rows = try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger)
        for try await (name, epoch, head, checksum, visible, floor, committedAt) in rows.decode((String, String, Int64, Int64, Int64, Int64, Int64?).self) {
            guard head > 0 else { continue }
            heads.append(CollectionHead(
                name: name, epoch: epoch, version: UInt64(head), checksum: StateChecksum(value: UInt64(bitPattern: checksum)),
                count: Int(visible), committedAt: committedAt ?? 0, floor: UInt64(floor)))
        }
        return heads
    }

    /// The state digest maintained by the writes; nil for an unknown collection.
    public func digest(of name: String) async throws -> StateDigest? {
        let rows = try await connection.query("SELECT digest FROM deltasnap_collections WHERE name = \(name)", logger: logger)
        for try await digest in rows.decode(ByteBuffer?.self) {
            return digest.flatMap { StateDigest(bytes: $0.readableBytesView) }
        }
        return nil
    }

    /// Raised by every commit to any collection, never lowered (see the signed index).
    public func publicationSequence() async throws -> UInt64 {
        let rows = try await connection.query("SELECT sequence FROM deltasnap_publication WHERE id = 1", logger: logger)
        for try await sequence in rows.decode(Int64.self) { return UInt64(sequence) }
        return 0
    }

    /// Calls `body` with each visible record's canonical bytes, sorted by id (byte-wise),
    /// streamed from one query.
    public func forEachVisibleRecord(in collection: String, _ body: ([UInt8]) throws -> Void) async throws {
        let rows = try await connection.query("""
            SELECT body FROM deltasnap_records
            WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND NOT hidden
            ORDER BY id
            """, logger: logger)
        for try await bytes in rows.decode(ByteBuffer.self) { try body(Array(bytes.readableBytesView)) }
    }

    /// The state digest recomputed from every visible record (O(n)); tests compare it with
    /// the maintained one.
    public func recomputedDigest(of collection: String) async throws -> StateDigest {
        var digest = StateDigest.empty
        let rows = try await connection.query("""
            SELECT id, body FROM deltasnap_records
            WHERE cid = (SELECT cid FROM deltasnap_collections WHERE name = \(collection)) AND NOT hidden
            """, logger: logger)
        for try await (id, body) in rows.decode((String, ByteBuffer).self) {
            digest.add(collection: collection, id: id, canonical: Array(body.readableBytesView))
        }
        return digest
    }
}
