import DeltaSnapCore
@testable import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// The SQLite read pool is capped as GRDB's `maximumReaderCount`: past the cap a read waits
/// for a connection to come back instead of opening another file descriptor set.
@Suite struct SQLiteReadPoolTests {
    /// Whether the read that sets `finished` is still waiting once `pool` holds it as a waiter
    /// (the pool handed it nothing).
    private func stillWaiting(_ finished: Flag, in pool: SQLiteReadPool) async throws -> Bool {
        try await eventually("the read never waited for a connection") { pool.waitingCount == 1 }
        return !finished.value
    }

    @Test func aReadPastTheCapWaitsForAConnectionToComeBack() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try Fixtures.importText(Fixtures.ndjson(0..<10), into: try SQLiteDatabase(path: db), collection: "items")
        let pool = SQLiteReadPool(path: db, maximumReaders: 2)
        let queue = BlockingQueue(label: "test", concurrent: true)
        let first = try await pool.checkout(openingOn: queue)
        let second = try await pool.checkout(openingOn: queue)
        #expect(pool.openCount == 2)

        let finished = Flag()
        let third = Task {
            let store = try await pool.checkout(openingOn: queue)
            finished.set()
            let head = try store.head(of: "items")
            pool.checkin(store)
            return head?.count
        }
        #expect(try await stillWaiting(finished, in: pool))
        #expect(pool.openCount == 2)

        pool.checkin(first)
        #expect(try await third.value == 10)
        #expect(pool.openCount == 2)
        pool.checkin(second)
        #expect(pool.idleStores.count == 2)
    }

    @Test func theStoreServesMoreReadsThanItsCapOneAfterAnother() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteCollectionStore(path: dir.file("s.sqlite"), maximumReaders: 1)
        _ = try await store.importBatch(Array(Fixtures.ndjson(0..<50).utf8), into: "items")

        // A body being streamed holds the only reader...
        let held = try await store.openRecords(in: "items", after: nil)
        let finished = Flag()
        let waiting = Task {
            let head = try await store.head(of: "items")
            finished.set()
            return head?.count
        }
        #expect(try await stillWaiting(finished, in: store.pool))
        // ...and the next read runs as soon as it is closed, on the same connection.
        await held.close()
        #expect(try await waiting.value == 50)

        // Many reads at once through one connection: each waits its turn, none fails.
        let counts = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<20 { group.addTask { try await store.head(of: "items")?.count ?? -1 } }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(counts == Array(repeating: 50, count: 20))
        await store.close()
    }
}

/// A flag set by one task and read by another.
private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var isSet = false
    var value: Bool { lock.withLock { isSet } }
    func set() { lock.withLock { isSet = true } }
}
