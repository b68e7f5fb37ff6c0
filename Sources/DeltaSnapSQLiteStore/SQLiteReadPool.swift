import DeltaSnapCore
import DeltaSnapStore
import Foundation

/// Read-only connections to an SQLite store, reused across reads, at most
/// ``maximumReaders`` open at once (as GRDB's `DatabasePool.maximumReaderCount`).
///
/// SQLite in WAL mode lets any number of readers run beside one writer; each read takes a
/// connection of its own for the length of its read transaction. Past the cap a read waits,
/// suspended (no thread is held), for the next connection to come back: a burst of slow
/// clients cannot open file descriptors without bound.
///
/// ```swift
/// let pool = SQLiteReadPool(path: "deltasnap.sqlite", maximumReaders: 8)
/// let head = try await pool.withStore { try $0.head(of: "countries") }
/// ```
final class SQLiteReadPool: Sendable {
    let path: String
    let maximumReaders: Int
    /// Connections kept open while unused; more are closed as they come back. Each holds
    /// three file descriptors (the database, its WAL, its shared memory).
    let maximumIdle: Int

    private struct State: Sendable {
        var idle: [Lease] = []
        /// Connections open now, idle or checked out.
        var open = 0
        /// Reads waiting for a connection, first come first served.
        var waiters: [CheckedContinuation<Lease, Never>] = []
    }

    // Guards `state` only, never across a call out.
    private let state = LockedValue(State())

    init(path: String, maximumReaders: Int = 64, maximumIdle: Int = 16) {
        precondition(maximumReaders > 0, "a read pool needs at least one connection")
        self.path = path
        self.maximumReaders = maximumReaders
        self.maximumIdle = min(maximumIdle, maximumReaders)
    }

    private enum Checkout {
        case reuse(SQLiteDatabase)
        case open
        case wait
    }

    private func reserve() -> Checkout {
        state.withLock { state in
            if let lease = state.idle.popLast() { return .reuse(lease.store) }
            guard state.open < maximumReaders else { return .wait }
            state.open += 1
            return .open
        }
    }

    private func openConnection() throws -> SQLiteDatabase {
        do {
            return try SQLiteDatabase(path: path, readOnly: true)
        } catch {
            state.withLock { $0.open -= 1 }
            throw error
        }
    }

    /// A connection now, or once one is checked in when all are in use. A new connection is
    /// opened on `queue`: opening can wait on SQLite's busy handler while a writer holds the
    /// file, and must not hold one of the cooperative pool's few threads meanwhile.
    func checkout(openingOn queue: BlockingQueue) async throws -> SQLiteDatabase {
        switch reserve() {
        case .reuse(let store): return store
        case .open: return try await queue.run { Lease(store: try self.openConnection()) }.store
        case .wait:
            let lease = await withCheckedContinuation { continuation in
                let handed: Lease? = state.withLock { state in
                    // A connection may have come back between reserve() and here.
                    if let lease = state.idle.popLast() { return lease }
                    state.waiters.append(continuation)
                    return nil
                }
                if let handed { continuation.resume(returning: handed) }
            }
            return lease.store
        }
    }

    /// A connection without waiting, opening one past the cap if need be: for a store's
    /// opening only, before any read can hold one.
    func checkoutOpening() throws -> SQLiteDatabase {
        switch reserve() {
        case .reuse(let store): return store
        case .open: return try openConnection()
        case .wait:
            state.withLock { $0.open += 1 }
            return try openConnection()
        }
    }

    /// The connections waiting in the pool (for tests).
    var idleStores: [SQLiteDatabase] { state.withLock { $0.idle.map(\.store) } }

    /// Connections open now, idle or in use (for tests).
    var openCount: Int { state.withLock { $0.open } }

    /// How many checkouts wait for a connection to come back.
    var waitingCount: Int { state.withLock { $0.waiters.count } }

    /// Gives `store` back: to the longest waiting read, or to the idle list (closed instead,
    /// on release, when the pool is over its cap or has enough idle connections).
    func checkin(_ store: SQLiteDatabase) {
        let waiter: CheckedContinuation<Lease, Never>? = state.withLock { state in
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            if state.open > maximumReaders || state.idle.count >= maximumIdle {
                state.open -= 1
            } else {
                state.idle.append(Lease(store: store))
            }
            return nil
        }
        waiter?.resume(returning: Lease(store: store))
    }

    /// Runs `body` with a pooled connection on `queue` (blocking work never runs on the
    /// cooperative pool); the wait for a connection, if any, is a suspension.
    func withStore<T: Sendable>(on queue: BlockingQueue, _ body: @escaping @Sendable (SQLiteDatabase) throws -> T) async throws -> T {
        let lease = Lease(store: try await checkout(openingOn: queue))
        defer { checkin(lease.store) }
        return try await queue.run { try body(lease.store) }
    }
}

/// A checked-out connection handed to the queue that uses it: one task holds it at a time,
/// from checkout to checkin (an idle one, none), so handing it over is safe though the class
/// is not Sendable.
struct Lease: Sendable {
    private let handed: HandedOver<SQLiteDatabase>
    var store: SQLiteDatabase { handed.value }

    init(store: SQLiteDatabase) {
        handed = HandedOver(store)
    }
}
