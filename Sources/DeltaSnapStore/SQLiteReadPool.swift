import Foundation

/// Read-only connections to an SQLite store, reused across reads.
///
/// SQLite in WAL mode lets any number of readers run beside one writer; each read takes a
/// connection of its own for the length of its read transaction.
final class SQLiteReadPool: @unchecked Sendable {
    let path: String
    // NSLock, not Mutex: the store links no NIO, and the package supports macOS 14, where
    // Synchronization's Mutex is not available (macOS 15).
    private let lock = NSLock()
    private var idle: [Store] = []
    private let maximumIdle: Int

    init(path: String, maximumIdle: Int = 16) {
        self.path = path
        self.maximumIdle = maximumIdle
    }

    func checkout() throws -> Store {
        if let store = lock.withLock({ idle.popLast() }) { return store }
        return try Store(path: path, readOnly: true)
    }

    /// The connections waiting in the pool (for tests).
    var idleStores: [Store] { lock.withLock { idle } }

    func checkin(_ store: Store) {
        lock.withLock {
            if idle.count < maximumIdle { idle.append(store) }
        }
    }

    /// Runs `body` with a pooled connection.
    func withStore<T>(_ body: (Store) throws -> T) throws -> T {
        let store = try checkout()
        defer { checkin(store) }
        return try body(store)
    }
}
