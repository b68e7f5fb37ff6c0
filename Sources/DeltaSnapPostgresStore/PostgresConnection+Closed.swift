import DeltaSnapCore
import DeltaSnapStore
import Logging
import PostgresNIO

extension PostgresConnection {
    /// `query(_:logger:)` that ends — "database unavailable", a `503` — when the connection
    /// closes under it, whatever PostgresNIO does with the query.
    ///
    /// Why: PostgresNIO (1.33) writes a query to its channel without a promise, and a query
    /// that reaches a connection as it closes (the server stopped or restarted) can be
    /// dropped with the promise its caller awaits: that `await` never returned. A transaction
    /// the stop broke hung on its next statement or its `ROLLBACK`, holding its request and a
    /// pool connection for good (`PostgresServingTests.writesInFlightWhenTheDatabaseStopsAreAllAnswered`
    /// caught one in ten runs even with the connection checked open just before). So the query
    /// runs in a task of its own, raced against the connection's close (``ConnectionCloseWatch``);
    /// a query abandoned that way costs its task, once per lost query.
    ///
    /// ```swift
    /// for try await id in try await connection.checkedQuery("SELECT id FROM deltasnap_records", logger: logger).decode(String.self) { … }
    /// ```
    @discardableResult
    package func checkedQuery(_ query: PostgresQuery, logger: Logger, file: String = #fileID, line: Int = #line) async throws -> PostgresRowSequence {
        try refuseIfClosed()
        return try await ConnectionCloseWatch.shared.run(on: self) { connection in
            try await connection.query(query, logger: logger, file: file, line: line)
        }
    }

    /// Throws "database unavailable" when the connection has closed (see ``checkedQuery(_:logger:file:line:)``).
    package func refuseIfClosed() throws {
        if isClosed { throw ConnectionCloseWatch.closed }
    }

    /// Runs `body` between `begin` and `COMMIT`; on any error, `ROLLBACK` — unless the
    /// connection closed, which ended the transaction already (PostgresNIO's own
    /// `withTransaction` sends its `ROLLBACK` regardless, and hung there).
    package func inTransaction<T>(_ begin: PostgresQuery = "BEGIN", logger: Logger, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await checkedQuery(begin, logger: logger)
        do {
            let result = try await body(self)
            try await checkedQuery("COMMIT", logger: logger)
            return result
        } catch {
            if !isClosed { _ = try? await checkedQuery("ROLLBACK", logger: logger) }
            throw error
        }
    }
}

/// The operations in flight on each open connection, ended with ``closed`` when it closes:
/// one callback on a connection's `closeFuture` for its life (not one per query, which would
/// pile up on a pooled connection), and a table entry per operation while it runs.
final class ConnectionCloseWatch: Sendable {
    static let shared = ConnectionCloseWatch()
    static let closed = StoreError.unavailable("PostgreSQL at the database", "the connection closed (the server stopped or restarted)")

    /// A connection's operations in flight, each a way to end its caller's wait.
    private struct Watched {
        var waiting: [UInt64: @Sendable () -> Void] = [:]
    }

    private let state = LockedValue((connections: [ObjectIdentifier: Watched](), nextID: UInt64(0)))

    /// `operation(connection)`'s result, or ``closed`` once `connection` closes before it ends.
    func run<T: Sendable>(on connection: PostgresConnection, _ operation: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let key = ObjectIdentifier(connection)
        let outcome = LockedValue<CheckedContinuation<T, any Error>?>(nil)
        @Sendable func finish(_ result: Result<T, any Error>) {
            outcome.withLock { continuation in
                defer { continuation = nil }
                return continuation
            }?.resume(with: result)
        }
        return try await withCheckedThrowingContinuation { continuation in
            outcome.withLock { $0 = continuation }
            let (id, isNew) = state.withLock { state in
                state.nextID += 1
                let isNew = state.connections[key] == nil
                state.connections[key, default: Watched()].waiting[state.nextID] = { finish(.failure(Self.closed)) }
                return (state.nextID, isNew)
            }
            if isNew {
                connection.closeFuture.whenComplete { [self] _ in
                    let waiting = state.withLock { $0.connections.removeValue(forKey: key)?.waiting.values.map { $0 } ?? [] }
                    for end in waiting { end() }
                }
            }
            Task {
                let result: Result<T, any Error>
                do { result = .success(try await operation(connection)) } catch { result = .failure(error) }
                state.withLock { _ = $0.connections[key]?.waiting.removeValue(forKey: id) }
                finish(result)
            }
        }
    }
}
