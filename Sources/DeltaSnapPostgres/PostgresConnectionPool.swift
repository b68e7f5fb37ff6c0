import Foundation
import Logging
import PostgresNIO

/// Connections to one PostgreSQL server, reused across operations.
///
/// Written here rather than using `PostgresClient` (postgres-nio's pool) because a streamed
/// body holds its connection — inside one read transaction — across many `await`s of an
/// HTTP response writer, which `PostgresClient.withConnection`'s closure-scoped lease cannot
/// express; and because a closed connection (a restarted server) must surface at once as
/// "database unavailable" rather than wait in the pool's queue. At most `maximumOpen`
/// connections are open at a time; further callers wait their turn.
final class PostgresConnectionPool: @unchecked Sendable {
    let url: PostgresURL
    private let logger: Logger
    private let lock = NSLock()
    private var idle: [PostgresConnection] = []
    private var open = 0
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var nextID = 1
    private let maximumOpen: Int

    init(url: PostgresURL, maximumOpen: Int = 24, logger: Logger) {
        self.url = url
        self.maximumOpen = maximumOpen
        self.logger = logger
    }

    /// An idle connection, or a new one; the caller must ``checkin(_:)`` it.
    func checkout() async throws -> PostgresConnection {
        while true {
            enum Next { case reuse(PostgresConnection), connect(Int), wait }
            let next: Next = lock.withLock {
                while let connection = idle.popLast() {
                    if !connection.isClosed { return .reuse(connection) }
                    open -= 1
                }
                guard open < maximumOpen else { return .wait }
                open += 1
                nextID += 1
                return .connect(nextID)
            }
            switch next {
            case .reuse(let connection):
                return connection
            case .connect(let id):
                do {
                    return try await PostgresConnection.connect(configuration: url.configuration, id: id, logger: logger)
                } catch {
                    release()
                    throw PostgresStoreError.unreachable(url.description, PostgresStoreError.reason(error))
                }
            case .wait:
                await withCheckedContinuation { continuation in
                    let runNow = lock.withLock {
                        // A connection may have come back between the decision and here.
                        if !idle.isEmpty || open < maximumOpen { return true }
                        waiters.append(continuation)
                        return false
                    }
                    if runNow { continuation.resume() }
                }
            }
        }
    }

    /// Returns a connection; a closed one (the server went away) is dropped.
    func checkin(_ connection: PostgresConnection) {
        let waiter: CheckedContinuation<Void, Never>? = lock.withLock {
            if connection.isClosed {
                open -= 1
            } else {
                idle.append(connection)
            }
            return waiters.isEmpty ? nil : waiters.removeFirst()
        }
        waiter?.resume()
    }

    /// Closes a connection whose state is unknown (an abandoned stream) instead of reusing it.
    func discard(_ connection: PostgresConnection) async {
        try? await connection.close()
        release()
    }

    private func release() {
        let waiter: CheckedContinuation<Void, Never>? = lock.withLock {
            open -= 1
            return waiters.isEmpty ? nil : waiters.removeFirst()
        }
        waiter?.resume()
    }

    /// Runs `body` with a pooled connection.
    func withConnection<T>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await checkout()
        do {
            let result = try await body(connection)
            checkin(connection)
            return result
        } catch {
            checkin(connection)
            throw PostgresStore.mapped(error)
        }
    }

    /// Closes every idle connection (at shutdown).
    func close() async {
        let connections = lock.withLock {
            defer { idle.removeAll() }
            open -= idle.count
            return idle
        }
        for connection in connections { try? await connection.close() }
    }
}
