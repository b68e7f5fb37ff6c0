import DeltaSnapStore
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
/// connections are open at a time; further callers wait their turn, at most
/// `checkoutTimeout` (then the request is answered `503`, never left hanging).
final class PostgresConnectionPool: @unchecked Sendable {
    let url: PostgresURL
    /// Built once: a TLS context loads the system's trust roots.
    let connectionConfiguration: PostgresConnection.Configuration
    private let logger: Logger
    private let lock = NSLock()
    private var idle: [PostgresConnection] = []
    private var open = 0
    /// Callers waiting for a connection: resumed with true to try again, false on timeout.
    private var waiters: [(id: Int, continuation: CheckedContinuation<Bool, Never>)] = []
    private var nextID = 1
    private let maximumOpen: Int
    private let checkoutTimeout: Duration
    /// Set by ``close()``: no connection is opened or kept after it (a task the server did not
    /// wait for — a watcher, a wake — may still ask; PostgresNIO traps on a connection
    /// released unclosed).
    private var isClosed = false

    init(url: PostgresURL, maximumOpen: Int = 24, checkoutTimeout: Duration = .seconds(10), logger: Logger) throws {
        self.url = url
        do {
            connectionConfiguration = try url.configuration
        } catch {
            throw StoreError.badLocation(url.description, "cannot set up TLS: \(error)")
        }
        self.maximumOpen = maximumOpen
        self.checkoutTimeout = checkoutTimeout
        self.logger = logger
    }

    /// An idle connection, or a new one; the caller must ``checkin(_:)`` it.
    func checkout() async throws -> PostgresConnection {
        while true {
            enum Next { case reuse(PostgresConnection), connect(Int), wait }
            let next: Next? = lock.withLock {
                if isClosed { return nil }
                while let connection = idle.popLast() {
                    if !connection.isClosed { return .reuse(connection) }
                    open -= 1
                }
                guard open < maximumOpen else { return .wait }
                open += 1
                nextID += 1
                return .connect(nextID)
            }
            guard let next else { throw StoreError.unavailable(url.description, "the store was closed") }
            switch next {
            case .reuse(let connection):
                return connection
            case .connect(let id):
                do {
                    return try await PostgresConnection.connect(configuration: connectionConfiguration, id: id, logger: logger)
                } catch {
                    release()
                    throw StoreError.unavailable(url.description, PostgresStore.reason(error))
                }
            case .wait:
                let granted = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                    let id: Int? = lock.withLock {
                        // A connection may have come back between the decision and here.
                        if !idle.isEmpty || open < maximumOpen { return nil }
                        nextID += 1
                        waiters.append((nextID, continuation))
                        return nextID
                    }
                    guard let id else { return continuation.resume(returning: true) }
                    Task { [checkoutTimeout] in
                        try? await Task.sleep(for: checkoutTimeout)
                        self.timeOut(waiter: id)
                    }
                }
                guard granted else {
                    throw StoreError.unavailable(url.description, "all \(maximumOpen) connections stayed busy for \(checkoutTimeout)")
                }
            }
        }
    }

    /// Returns a connection; a closed one (the server went away) is dropped.
    func checkin(_ connection: PostgresConnection) {
        let (waiter, closing) = lock.withLock {
            let closing = isClosed && !connection.isClosed
            if connection.isClosed || isClosed {
                open -= 1
            } else {
                idle.append(connection)
            }
            return (waiters.isEmpty ? nil : waiters.removeFirst(), closing)
        }
        if closing { Task { try? await connection.close() } }
        waiter?.continuation.resume(returning: true)
    }

    private func timeOut(waiter id: Int) {
        let waiter = lock.withLock { () -> (id: Int, continuation: CheckedContinuation<Bool, Never>)? in
            guard let index = waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return waiters.remove(at: index)
        }
        waiter?.continuation.resume(returning: false)
    }

    /// Closes a connection whose state is unknown (an abandoned stream) instead of reusing it.
    func discard(_ connection: PostgresConnection) async {
        try? await connection.close()
        release()
    }

    private func release() {
        let waiter = lock.withLock {
            open -= 1
            return waiters.isEmpty ? nil : waiters.removeFirst()
        }
        waiter?.continuation.resume(returning: true)
    }

    /// Runs `body` with a pooled connection.
    func withConnection<T>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await checkout()
        do {
            let result = try await body(connection)
            checkin(connection)
            return result
        } catch let error as ImportError {
            // Refused input: the transaction rolled back cleanly, the connection is fine.
            checkin(connection)
            throw error
        } catch {
            // Anything else may have left it mid-transaction or mid-stream: never reuse it.
            await discard(connection)
            throw PostgresStore.mapped(error)
        }
    }

    /// Closes every idle connection (at shutdown).
    func close() async {
        let connections = lock.withLock {
            isClosed = true
            defer { idle.removeAll() }
            open -= idle.count
            return idle
        }
        for connection in connections { try? await connection.close() }
    }
}
