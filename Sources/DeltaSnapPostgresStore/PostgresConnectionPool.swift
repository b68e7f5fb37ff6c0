import DeltaSnapStore
import Foundation
import Logging
import NIOConcurrencyHelpers
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
final class PostgresConnectionPool: Sendable {
    let url: PostgresURL
    /// Built once: a TLS context loads the system's trust roots.
    let connectionConfiguration: PostgresConnection.Configuration
    private let logger: Logger
    private let maximumOpen: Int
    private let checkoutTimeout: Duration

    /// Everything that changes, as one plain value behind one lock.
    private struct State {
        var idle: [PostgresConnection] = []
        var open = 0
        /// Callers waiting for a connection: resumed with true to try again, false on timeout.
        var waiters: [(id: Int, continuation: CheckedContinuation<Bool, Never>)] = []
        var nextID = 1
        /// Set by ``close()``: no connection is opened or kept after it (a task the server did
        /// not wait for — a watcher, a wake — may still ask; PostgresNIO traps on a connection
        /// released unclosed).
        var isClosed = false

        mutating func takeWaiter() -> CheckedContinuation<Bool, Never>? {
            waiters.isEmpty ? nil : waiters.removeFirst().continuation
        }
    }

    private let state = NIOLockedValueBox(State())

    init(url: PostgresURL, maximumOpen: Int = 24, checkoutTimeout: Duration = .seconds(10), logger: Logger) throws {
        self.url = url
        do {
            connectionConfiguration = try url.configuration
        } catch {
            throw StoreError.badLocation(url.description, "cannot set up TLS: \(error)", underlying: error)
        }
        self.maximumOpen = maximumOpen
        self.checkoutTimeout = checkoutTimeout
        self.logger = logger
    }

    /// An idle connection, or a new one; the caller must ``checkin(_:)`` it.
    func checkout() async throws -> PostgresConnection {
        while true {
            enum Next { case reuse(PostgresConnection), connect(Int), wait }
            let next: Next? = state.withLockedValue { state in
                if state.isClosed { return nil }
                while let connection = state.idle.popLast() {
                    if !connection.isClosed { return .reuse(connection) }
                    state.open -= 1
                }
                guard state.open < maximumOpen else { return .wait }
                state.open += 1
                state.nextID += 1
                return .connect(state.nextID)
            }
            guard let next else { throw StoreError.unavailable("PostgreSQL at \(url)", "the store was closed") }
            switch next {
            case .reuse(let connection):
                return connection
            case .connect(let id):
                do {
                    return try await PostgresConnection.connect(configuration: connectionConfiguration, id: id, logger: logger)
                } catch {
                    release()
                    throw StoreError.unavailable("PostgreSQL at \(url)", PostgresDatabase.reason(error), underlying: error)
                }
            case .wait:
                let granted = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                    let id: Int? = state.withLockedValue { state in
                        // A connection may have come back between the decision and here.
                        if !state.idle.isEmpty || state.open < maximumOpen { return nil }
                        state.nextID += 1
                        state.waiters.append((state.nextID, continuation))
                        return state.nextID
                    }
                    guard let id else { return continuation.resume(returning: true) }
                    Task { [checkoutTimeout] in
                        try? await Task.sleep(for: checkoutTimeout)
                        self.timeOut(waiter: id)
                    }
                }
                guard granted else {
                    throw StoreError.unavailable("PostgreSQL at \(url)", "all \(maximumOpen) connections stayed busy for \(checkoutTimeout)")
                }
            }
        }
    }

    /// Returns a connection; a closed one (the server went away) is dropped.
    func checkin(_ connection: PostgresConnection) {
        let (waiter, closing) = state.withLockedValue { state in
            let closing = state.isClosed && !connection.isClosed
            if connection.isClosed || state.isClosed {
                state.open -= 1
            } else {
                state.idle.append(connection)
            }
            return (state.takeWaiter(), closing)
        }
        if closing { Task { try? await connection.close() } }
        waiter?.resume(returning: true)
    }

    private func timeOut(waiter id: Int) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Bool, Never>? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index).continuation
        }
        waiter?.resume(returning: false)
    }

    /// Closes a connection whose state is unknown (an abandoned stream) instead of reusing it.
    func discard(_ connection: PostgresConnection) async {
        try? await connection.close()
        release()
    }

    private func release() {
        let waiter = state.withLockedValue { state in
            state.open -= 1
            return state.takeWaiter()
        }
        waiter?.resume(returning: true)
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
            throw PostgresDatabase.mapped(error)
        }
    }

    /// A pool released without ``close()`` (its owner threw on the way) still closes its idle
    /// connections rather than leak their sockets; each is kept alive until its close is done,
    /// as PostgresNIO requires of a connection it releases.
    deinit {
        for connection in state.withLockedValue({ $0.idle }) {
            connection.close().whenComplete { _ in withExtendedLifetime(connection) {} }
        }
    }

    /// Closes every idle connection (at shutdown).
    func close() async {
        let connections = state.withLockedValue { state in
            state.isClosed = true
            defer { state.idle.removeAll() }
            state.open -= state.idle.count
            return state.idle
        }
        for connection in connections { try? await connection.close() }
    }
}
