import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation

/// The embedded default: one SQLite file, read by pooled read-only connections (WAL lets
/// them run beside the writer) and written by one connection at a time.
final class SQLiteBackend: ServerBackend {
    let pool: StorePool
    let writer: LockedStore
    private let path: String

    init(path: String) throws {
        // The writer creates the schema, so read-only connections can open the file.
        writer = LockedStore(try Store(path: path, configuration: .fromEnvironment()))
        pool = StorePool(path: path)
        self.path = path
    }

    func collections() async throws -> [CollectionHead] {
        try pool.withStore { try $0.collections() }
    }

    func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource {
        try SQLiteRecordSource(pool: pool, collection: collection, after: version)
    }

    func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        try pool.withStore { store in try store.read { try $0.firstVersion(in: collection, committedAtOrAfter: seconds) } }
    }

    func publishedState(including included: @escaping @Sendable (String) -> Bool) async throws -> (sequence: UInt64, entries: [SignedIndex.Entry]) {
        try pool.withStore { store in try store.read { try $0.publishedState(including: included) } }
    }

    func write(_ records: [Record], to collection: String) async throws -> WriteResult {
        try writer.withStore { store in
            try store.write(to: collection) { writer in
                for record in records { try writer.put(record) }
            }
        }
    }

    func importBatch(_ body: [UInt8], into collection: String, replace: Bool) async throws -> WriteResult {
        try writer.withStore { store in
            try Importer(store: store, collection: collection, replace: replace).run(source: ChunkSources.bytes(body), name: "body")
        }
    }

    func push(_ mutations: [ParsedMutation], from client: String, user: String?, to collection: String, retention: PushRetention) async throws -> PushOutcome {
        try writer.withStore { try $0.push(mutations, from: client, user: user, to: collection, retention: retention) }
    }

    func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry] {
        try pool.withStore { try $0.history(of: id, in: collection, limit: limit) }
    }

    func compact(_ collection: String, policy: CompactionPolicy) async throws -> CompactionResult? {
        try writer.withStore { try $0.compact(collection, policy: policy) }
    }

    /// Polls SQLite's `data_version`, which changes whenever another connection commits.
    func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async {
        // Runs until cancelled, whatever happens: the server stops when its watcher returns.
        var watcher: Store?
        var lastDataVersion: Int64?
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            if watcher == nil { watcher = try? Store(path: path, readOnly: true) }
            guard let watcher, let version = try? watcher.dataVersion(), version != lastDataVersion else { continue }
            lastDataVersion = version
            if let heads = try? watcher.collections() { onChange(heads) }
        }
    }

    func shutdown() async {}
}

/// A read transaction on a pooled SQLite connection and a cursor over its records.
final class SQLiteRecordSource: RecordSource, @unchecked Sendable {
    let head: CollectionHead
    let count: Int
    private let pool: StorePool
    private var store: Store?
    /// Holds a prepared statement of `store`'s connection: released before the connection
    /// goes back to the pool, or finalising it later would race another request using it.
    private var cursor: RecordCursor?

    init(pool: StorePool, collection: String, after version: UInt64?) throws {
        self.pool = pool
        let store = try pool.checkout()
        do {
            let reader = try store.beginRead()
            guard let head = try reader.head(of: collection) else { throw APIError.unknownCollection(collection) }
            self.head = head
            if let version {
                count = try reader.changeCount(in: collection, after: version)
                cursor = try reader.changes(in: collection, after: version)
            } else {
                count = head.count
                cursor = try reader.visibleRecords(in: collection)
            }
        } catch {
            cursor = nil
            store.endRead()
            pool.checkin(store)
            throw error
        }
        self.store = store
    }

    deinit {
        closeNow()
    }

    func next(_ body: (UnsafeRawBufferPointer) throws -> Void) async throws -> Bool {
        // Through the property, never a local copy: close() must be able to drop the last
        // reference to the statement before the connection is returned.
        try cursor?.next(body) ?? false
    }

    func close() async {
        closeNow()
    }

    private func closeNow() {
        guard let store else { return }
        cursor = nil
        store.endRead()
        pool.checkin(store)
        self.store = nil
    }
}

/// The one writing connection, used by one request at a time.
final class LockedStore: @unchecked Sendable {
    private let lock = NSLock()
    private let store: Store

    init(_ store: Store) {
        self.store = store
    }

    func withStore<T>(_ body: (Store) throws -> T) rethrows -> T {
        try lock.withLock { try body(store) }
    }
}
