import DeltaSnapPostgresStore
import DeltaSnapTestSupport
import Foundation
import Logging
import PostgresNIO

/// A throwaway source database for `deltasnap follow`: a PostgreSQL cluster with
/// `wal_level=logical`, and one connection the test writes through (as the app would).
final class SourceDatabase: Sendable {
    let cluster: PostgresCluster
    let connection: PostgresConnection
    static let logger = Logger(label: "source")

    var url: String { cluster.url }

    private init(cluster: PostgresCluster, connection: PostgresConnection) {
        self.cluster = cluster
        self.connection = connection
    }

    static func start(in dir: TemporaryDirectory) async throws -> SourceDatabase {
        let cluster = try await PostgresCluster.start(in: dir.path, name: "source", settings: ["wal_level=logical", "synchronous_commit=on", "max_wal_senders=4"])
        do {
            let connection = try await PostgresConnection.connect(configuration: PostgresURL(cluster.url).configuration, id: 9, logger: logger)
            return SourceDatabase(cluster: cluster, connection: connection)
        } catch {
            cluster.stop()
            throw error
        }
    }

    /// Runs one statement (its own transaction).
    func run(_ sql: String) async throws {
        try await connection.query(PostgresQuery(unsafeSQL: sql), logger: Self.logger)
    }

    /// Runs `statements` as one transaction, committed (or rolled back).
    func transaction(_ statements: [String], rollback: Bool = false) async throws {
        try await run("BEGIN")
        for statement in statements { try await run(statement) }
        try await run(rollback ? "ROLLBACK" : "COMMIT")
    }

    /// Each row of `query` as its columns' text (NULL as nil).
    func rows(_ query: String) async throws -> [[String?]] {
        var rows: [[String?]] = []
        for try await row in try await connection.query(PostgresQuery(unsafeSQL: query), logger: Self.logger) {
            rows.append(row.map { cell in cell.bytes.map { String(buffer: $0) } })
        }
        return rows
    }

    func stop() async {
        try? await connection.close()
        cluster.stop()
    }
}
