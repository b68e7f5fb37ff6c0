import DeltaSnapCore
import DeltaSnapPostgresStore
import DeltaSnapStore
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// How `deltasnap follow` reaches its source and what it publishes.
package struct FollowOptions: Sendable {
    package var source: PostgresURL
    package var tables: [FollowedTable]
    package var slot: String
    package var publication: String
    /// Create the slot and the publication when missing (else their absence is an error).
    package var create: Bool
    /// WAL the slot may hold back before it is reported (a forgotten slot fills a disk).
    package var maxLagBytes: UInt64
    /// How long an idle follower waits before asking the source again.
    package var pollInterval: Duration
    /// Changes asked for at once (whole transactions are always read whole).
    package var batchChanges: Int
    /// How often the slot's lag and the publication's tables are checked.
    package var checkInterval: Duration
    /// Rows of one source transaction held in memory; past them it is staged in a temporary
    /// file until its commit (``TransactionSpill``).
    package var spillRows: Int

    package init(
        source: PostgresURL, tables: [FollowedTable], slot: String, publication: String, create: Bool = false, maxLagBytes: UInt64 = 1 << 30,
        pollInterval: Duration = .milliseconds(20), batchChanges: Int = 10_000, checkInterval: Duration = .seconds(10), spillRows: Int = 50_000
    ) {
        self.source = source
        self.tables = tables
        self.slot = slot
        self.publication = publication
        self.create = create
        self.maxLagBytes = maxLagBytes
        self.pollInterval = pollInterval
        self.batchChanges = batchChanges
        self.checkInterval = checkInterval
        self.spillRows = spillRows
    }

    /// The name the store keeps this follower's position under: one per slot.
    package var followerName: String { "postgres-slot:" + slot }
}

/// Follows a PostgreSQL database by logical decoding (the built-in `pgoutput` plugin, read
/// through `pg_logical_slot_peek_binary_changes` on an ordinary connection: the role needs
/// `REPLICATION` and `SELECT` only) and publishes each source transaction as one version of
/// every collection or partition it touched, in one store transaction that also records
/// the source position (``FollowPosition``). The slot is advanced only after that commit,
/// so a follower killed at any moment resumes after exactly what it published.
///
/// The first run copies every table in one `REPEATABLE READ` snapshot and publishes the
/// copy in one store transaction; a transaction that snapshot already saw is skipped when
/// the stream delivers it (``CopySnapshot``), so nothing is applied twice.
///
/// ```swift
/// let follower = SourceFollower(options: options, store: store, logger: logger) { print($0) }
/// try await follower.run()   // until the task is cancelled
/// ```
package final class SourceFollower: Sendable {
    let options: FollowOptions
    let store: any CollectionStore
    let logger: Logger
    /// One line per published batch (`attempts/alice: version 12, 3 rows, lag 4 ms`).
    let report: @Sendable (String) -> Void

    package init(options: FollowOptions, store: any CollectionStore, logger: Logger, report: @escaping @Sendable (String) -> Void) {
        self.options = options
        self.store = store
        self.logger = logger
        self.report = report
    }

    /// Copies (first run) then follows until cancelled. Throws ``FollowError`` for what the
    /// operator must change, and the source's or store's errors when they fail.
    package func run() async throws {
        TransactionSpill.removeAbandoned()
        let connection = try await Self.connect(options.source, logger: logger)
        let catalog: PostgresConnection
        do {
            catalog = try await Self.connect(options.source, logger: logger)
        } catch {
            try? await connection.close()
            throw error
        }
        do {
            try await SourceLoss.racing([connection, catalog]) { try await self.follow(on: connection, catalog: catalog) }
            try? await connection.close()
            try? await catalog.close()
        } catch {
            try? await connection.close()
            try? await catalog.close()
            throw Self.sourceError(error)
        }
    }

    /// The source's own message for what it refused (PostgresNIO hides it from `description`).
    static func sourceError(_ error: any Error) -> any Error {
        guard error is PSQLError else { return error }
        return FollowError.source("the source: \(PostgresErrorReason.line(error))")
    }

    /// Removes the slot (and the position the store keeps for it): `follow --drop-slot`.
    package static func dropSlot(_ options: FollowOptions, store: any CollectionStore, logger: Logger) async throws -> Bool {
        let connection = try await connect(options.source, logger: logger)
        do {
            var dropped = false
            for try await _ in try await connection.query(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = \(options.slot)", logger: logger
            ) { dropped = true }
            _ = try await store.forgetSourcePosition(of: options.followerName)
            try? await connection.close()
            return dropped
        } catch {
            try? await connection.close()
            throw sourceError(error)
        }
    }

    static func connect(_ url: PostgresURL, logger: Logger) async throws -> PostgresConnection {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: url.configuration, id: 1, logger: logger)
        } catch {
            throw FollowError.source("cannot reach the source \(url): \(PostgresErrorReason.line(error))")
        }
        // Values are read in their text form (``PgTextMapping``): fix how that form looks
        // (`money` by the source's locale otherwise: `lc_monetary C` writes `$1,234.50`).
        for setting in [
            "DateStyle TO ISO", "TimeZone TO 'UTC'", "bytea_output TO hex", "extra_float_digits TO 1", "IntervalStyle TO iso_8601", "lc_monetary TO 'C'",
        ] {
            try await connection.query(PostgresQuery(unsafeSQL: "SET " + setting), logger: logger)
        }
        return connection
    }

    // MARK: - Setting up

    private func follow(on connection: PostgresConnection, catalog: PostgresConnection) async throws {
        var walLevel = ""
        for try await level in try await connection.query("SHOW wal_level", logger: logger).decode(String.self) { walLevel = level }
        guard walLevel == "logical" else {
            throw FollowError.source("the source has wal_level=\(walLevel); logical decoding needs wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)")
        }
        try await checkPrivileges(on: connection)
        var shapes: [String: TableShape] = [:]
        for table in options.tables { shapes[table.qualifiedName] = try await shape(of: table, on: connection) }
        try await ensurePublication(on: connection)
        let created = try await ensureSlot(on: connection)
        var position = try await store.sourcePosition(of: options.followerName).flatMap(FollowPosition.init(parsing:))
        if created || position == nil {
            position = try await copy(shapes, on: connection)
        }
        // The records have the columns last published; the stream's next `Relation` tells
        // whether the table changed since.
        for (name, columns) in position!.columns {
            guard let shape = shapes[name] else { continue }
            shapes[name] = try TableShape(table: shape.table, columns: columns, key: shape.key)
        }
        try await stream(from: position!, shapes: shapes, on: connection, catalog: catalog)
    }

    /// Refuses, before anything is written (the store, a publication, a slot), a role that
    /// cannot follow: logical decoding needs `REPLICATION` (or a superuser), the copy needs
    /// `SELECT` on every table. Bad input leaves nothing behind (issue 45).
    private func checkPrivileges(on connection: PostgresConnection) async throws {
        var role = ""
        var replication = false
        for try await (name, allowed) in try await connection.query(
            "SELECT current_user::text, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user", logger: logger
        ).decode((String, Bool).self) { (role, replication) = (name, allowed) }
        guard replication else {
            throw FollowError.source("role \(role) may not use logical replication: it needs the REPLICATION attribute (ALTER ROLE \(Self.quoted(role)) REPLICATION)")
        }
        for table in options.tables {
            let name = Self.quoted(table.schema) + "." + Self.quoted(table.table)
            for try await allowed in try await connection.query(
                "SELECT has_table_privilege(to_regclass(\(name)), 'SELECT') WHERE to_regclass(\(name)) IS NOT NULL", logger: logger
            ).decode(Bool.self) where !allowed {
                throw FollowError.source("role \(role) may not read \(table.qualifiedName) (GRANT SELECT ON \(name) TO \(Self.quoted(role)))")
            }
        }
    }

    /// A table's columns and primary key from the catalog; checks what following it needs.
    func shape(of table: FollowedTable, on connection: PostgresConnection) async throws -> TableShape {
        var columns: [(PgRelation.Column, Int64)] = []
        var identity = "d"
        for try await (name, type, keyPosition, replident) in try await connection.query("""
            SELECT a.attname::text, a.atttypid::int8, coalesce((SELECT k.n FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(att, n) WHERE k.att = a.attnum), 0)::int8, c.relreplident::text
            FROM pg_class c
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
            LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
            WHERE c.oid = to_regclass(quote_ident(\(table.schema)) || '.' || quote_ident(\(table.table)))
            ORDER BY a.attnum
            """, logger: logger).decode((String, Int64, Int64, String).self) {
            columns.append((PgRelation.Column(name: name, typeOID: UInt32(truncatingIfNeeded: type), isKey: keyPosition > 0), keyPosition))
            identity = replident
        }
        guard !columns.isEmpty else { throw FollowError.source("\(table.qualifiedName): no such table in the source (or no SELECT right on it)") }
        let key = columns.filter { $0.1 > 0 }.sorted { $0.1 < $1.1 }.map(\.0.name)
        let shape = try TableShape(table: table, columns: try await resolvingDomains(columns.map(\.0), on: connection), key: key)
        if let partition = table.partitionBy, identity != "f", !key.contains(partition) {
            throw FollowError.source("""
                --partition-by \(partition): a change must name the partition it leaves, so \(partition) must be part of \(table.qualifiedName)'s \
                primary key, or the table needs ALTER TABLE \(table.qualifiedName) REPLICA IDENTITY FULL
                """)
        }
        return shape
    }

    private func ensurePublication(on connection: PostgresConnection) async throws {
        var published: Set<String> = []
        var exists = false
        for try await (exist, schema, table) in try await connection.query("""
            SELECT true, t.schemaname::text, t.tablename::text FROM pg_publication p
            LEFT JOIN pg_publication_tables t ON t.pubname = p.pubname WHERE p.pubname = \(options.publication)
            """, logger: logger).decode((Bool, String?, String?).self) {
            exists = exist
            if let schema, let table { published.insert(schema + "." + table) }
        }
        let missing = options.tables.filter { !published.contains($0.qualifiedName) }
        guard !missing.isEmpty else { return }
        let list = missing.map { Self.quoted($0.schema) + "." + Self.quoted($0.table) }.joined(separator: ", ")
        guard options.create else {
            throw FollowError.source(exists
                ? "publication \(options.publication) does not include \(missing.map(\.qualifiedName).joined(separator: ", ")) (ALTER PUBLICATION \(Self.quoted(options.publication)) ADD TABLE \(list), or --create)"
                : "publication \(options.publication) does not exist (CREATE PUBLICATION \(Self.quoted(options.publication)) FOR TABLE \(list), or --create)")
        }
        let statement = exists
            ? "ALTER PUBLICATION \(Self.quoted(options.publication)) ADD TABLE \(list)"
            : "CREATE PUBLICATION \(Self.quoted(options.publication)) FOR TABLE \(list)"
        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        logger.info("publication \(options.publication): \(exists ? "added" : "created with") \(missing.map(\.qualifiedName).joined(separator: ", "))")
    }

    /// Whether the slot had to be created now (everything must then be copied again).
    private func ensureSlot(on connection: PostgresConnection) async throws -> Bool {
        for try await plugin in try await connection.query(
            "SELECT plugin::text FROM pg_replication_slots WHERE slot_name = \(options.slot)", logger: logger
        ).decode(String?.self) {
            guard plugin == "pgoutput" else { throw FollowError.source("slot \(options.slot) exists but decodes with \(plugin ?? "no plugin"), not pgoutput") }
            return false
        }
        guard options.create else {
            throw FollowError.source("replication slot \(options.slot) does not exist (SELECT pg_create_logical_replication_slot('\(options.slot)', 'pgoutput'), or --create)")
        }
        try await connection.query("SELECT pg_create_logical_replication_slot(\(options.slot), 'pgoutput')", logger: logger)
        logger.info("replication slot \(options.slot) created")
        return true
    }

    /// A column as the copy reads it: the text of its type's output function — what the
    /// stream (pgoutput) sends for it, so a value maps the same copied or streamed. A cast to
    /// `text` gives that for most types, but not `char(n)` (the cast trims the padding) nor
    /// `inet` (the cast adds `/32`, `/128`): for those, `concat` (which calls the output
    /// function) on a value that is not NULL.
    static func copiedText(_ column: PgRelation.Column) -> String {
        let name = quoted(column.name)
        switch column.typeOID {
        case 1042, 869: return "CASE WHEN \(name) IS NULL THEN NULL ELSE concat(\(name)) END"
        default: return name + "::text"
        }
    }

    /// `columns` with each domain's type replaced by its base type (through domains of
    /// domains): a value maps as its base type does (`CREATE DOMAIN qty AS integer` → a
    /// number). The catalog names the domain (`atttypid`), and so does the stream's
    /// `Relation` message; both go through here, so the copy and the stream agree.
    func resolvingDomains(_ columns: [PgRelation.Column], on connection: PostgresConnection) async throws -> [PgRelation.Column] {
        // Built-in types (below FirstNormalObjectId, 16384) are never domains.
        let user = Set(columns.map(\.typeOID).filter { $0 >= 16384 }).map(Int64.init)
        guard !user.isEmpty else { return columns }
        var base: [UInt32: UInt32] = [:]
        for try await (domain, type) in try await connection.query("""
            WITH RECURSIVE chain(start, oid, typtype, typbasetype) AS (
                SELECT t.oid, t.oid, t.typtype, t.typbasetype FROM pg_type t WHERE t.oid::int8 = ANY(\(user)) AND t.typtype = 'd'
                UNION ALL
                SELECT c.start, t.oid, t.typtype, t.typbasetype FROM chain c JOIN pg_type t ON t.oid = c.typbasetype WHERE c.typtype = 'd')
            SELECT start::int8, oid::int8 FROM chain WHERE typtype <> 'd'
            """, logger: logger).decode((Int64, Int64).self) {
            base[UInt32(truncatingIfNeeded: domain)] = UInt32(truncatingIfNeeded: type)
        }
        return columns.map { column in
            var column = column
            column.typeOID = base[column.typeOID] ?? column.typeOID
            return column
        }
    }

    static func quoted(_ identifier: String) -> String {
        "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    // MARK: - The initial copy

    /// Every table as of one snapshot, published in one store transaction with the
    /// snapshot (``CopySnapshot``) as the position. Past ``FollowOptions/spillRows`` rows the
    /// copy is staged in a file (``TransactionSpill``), as a large source transaction is.
    private func copy(_ shapes: [String: TableShape], on connection: PostgresConnection) async throws -> FollowPosition {
        let started = ContinuousClock.now
        try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
        var snapshot: CopySnapshot?
        var groups: [String: [Record]] = [:]
        var spill: TransactionSpill?
        var rows = 0
        do {
            for try await (text, boundary) in try await connection.query(
                "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text", logger: logger
            ).decode((String, String).self) {
                snapshot = PgOutputMessage.lsn(boundary).flatMap { CopySnapshot(parsing: text, boundary: $0) }
            }
            for table in options.tables {
                let shape = shapes[table.qualifiedName]!
                let columns = shape.columns.map(Self.copiedText).joined(separator: ", ")
                let query = PostgresQuery(unsafeSQL: "SELECT \(columns) FROM \(Self.quoted(table.schema)).\(Self.quoted(table.table))")
                for try await row in try await connection.query(query, logger: logger) {
                    let values = row.map { cell in cell.bytes.map { PgValue.text(String(buffer: $0)) } ?? .null }
                    switch shape.record(from: values) {
                    case .success(let (path, record)):
                        if let spill { try spill.set(record, at: path) } else { groups[path, default: []].append(record) }
                    case .failure(let problem): logger.warning("\(table.qualifiedName): a row is not published: \(problem)")
                    }
                    rows += 1
                    if spill == nil, rows > options.spillRows {
                        spill = try TransactionSpill()
                        for (path, records) in groups { for record in records { try spill!.set(record, at: path) } }
                        groups = [:]
                        logger.notice("copy: more than \(options.spillRows) rows, staged in a temporary file until it is published")
                    }
                    if rows % 100_000 == 0 { report("copy: \(rows) rows read") }
                }
            }
            try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
        guard let snapshot else { throw FollowError.source("the source did not give its snapshot") }
        // Partitions the store holds that the copy no longer has rows for are emptied too.
        let copied = { (path: String) throws -> Bool in try spill?.contains(path: path) ?? (groups[path] != nil) }
        var emptied: [String] = []
        for table in options.tables where table.partitionBy != nil {
            for path in try await store.partitions(of: table.collection) where try !copied(path) { emptied.append(path) }
        }
        for table in options.tables where try table.partitionBy == nil && !copied(table.collection) { emptied.append(table.collection) }
        let position = FollowPosition(applied: 0, copy: snapshot, columns: shapes.mapValues { $0.columns.map { PgRelation.Column(name: $0.name, typeOID: $0.typeOID, isKey: false) } })
        let recorded = SourcePosition(follower: options.followerName, position: position.text)
        let results: [WriteResult]
        if let spill {
            results = try await store.importStreams(try spill.streams(then: emptied), replace: true, recording: recorded)
        } else {
            for path in emptied { groups[path] = [] }
            let partitions = groups.keys.sorted { $0.utf8Precedes($1) }.map { PartitionRecords(path: $0, records: groups[$0]!) }
            results = try await store.importPartitions(partitions, replace: true, recording: recorded)
        }
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        report("copy: \(rows) rows from \(options.tables.count) table\(options.tables.count == 1 ? "" : "s") into \(results.filter(\.committed).count) collection\(results.count == 1 ? "" : "s") or partitions [\(String(format: "%.2f", seconds)) s, \(Int(Double(rows) / max(seconds, 0.001))) rows/s]")
        return position
    }
}
