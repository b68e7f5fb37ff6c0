import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapStoreLocation
import Foundation

/// The two stores a server can run on, for tests that run on both.
package enum TestBackend: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite, postgres
    package var description: String { rawValue }
}

/// A production store of either kind, fresh for one test: an SQLite file, or a throwaway
/// PostgreSQL cluster on a free loopback port (stopped by PID in ``stop()``). ``store`` is
/// what `StoreLocation.open` opens for `--db`, so tests on it test the code `serve` runs.
///
/// ```swift
/// let database = try await TestDatabase.make(.postgres, in: dir)
/// defer { database.stop() }
/// let server = try await TestServer.start(database: database.url)
/// ```
package final class TestDatabase: Sendable {
    package let backend: TestBackend
    /// What `--db` takes: the SQLite path or the PostgreSQL URL.
    package let url: String
    package let cluster: PostgresCluster?
    /// The store, through the one protocol every store conforms to.
    package let store: any CollectionStore

    private init(backend: TestBackend, url: String, cluster: PostgresCluster?, store: any CollectionStore) {
        self.backend = backend
        self.url = url
        self.cluster = cluster
        self.store = store
    }

    package static func make(_ backend: TestBackend, in dir: TemporaryDirectory, configuration: StoreConfiguration = StoreConfiguration()) async throws -> TestDatabase {
        switch backend {
        case .sqlite:
            let path = dir.file("s.sqlite")
            return TestDatabase(backend: backend, url: path, cluster: nil, store: try await StoreLocation.sqlite(path: path).open(configuration: configuration))
        case .postgres:
            let cluster = try await PostgresCluster.start(in: dir.path)
            do {
                let store = try await StoreLocation(cluster.url).open(configuration: configuration)
                return TestDatabase(backend: backend, url: cluster.url, cluster: cluster, store: store)
            } catch {
                cluster.stop()
                throw error
            }
        }
    }

    /// A handle on a running cluster (after a restart), owning nothing: ``stop()`` closes
    /// the connection only.
    package static func reconnect(to cluster: PostgresCluster) async throws -> TestDatabase {
        TestDatabase(backend: .postgres, url: cluster.url, cluster: nil, store: try await StoreLocation(cluster.url).open(configuration: StoreConfiguration()))
    }

    /// Imports NDJSON text straight into the store (another process's import, as far as a
    /// server can tell).
    @discardableResult
    package func importText(_ text: String, collection: String, replace: Bool = false) async throws -> WriteResult {
        try await store.importRecords(
            from: RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "test"), into: collection, replace: replace, progress: nil)
    }

    /// NDJSON spread over partitions `collection/VALUE` by the value of `field`.
    @discardableResult
    package func importPartitioned(_ text: String, collection: String, by field: String, replace: Bool = false) async throws -> [WriteResult] {
        let partitions = try PartitionRecords.streams(RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "test"), collection: collection, by: field)
        return try await store.importStreams(partitions, replace: replace, recording: nil)
    }

    package func head(of collection: String) async throws -> CollectionHead? {
        try await store.head(of: collection)
    }

    /// The visible records as `export` prints them (NDJSON, id order).
    package func export(_ collection: String) async throws -> String {
        var out: [UInt8] = []
        try await store.export(collection) { out += $0 }
        return String(decoding: out, as: UTF8.self)
    }

    /// Every record changed after `version` (tombstones included), canonical bytes, id order.
    package func changes(after version: UInt64, in collection: String) async throws -> [String] {
        try await store.withRecords(in: collection, after: version) { source in
            var out: [String] = []
            while try await source.next({ out.append(String(decoding: $0, as: UTF8.self)) }) {}
            return out
        }
    }

    /// Deletes tombstones up to `version` and raises the floor; how many went.
    @discardableResult
    package func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int {
        try await store.compact(collection, throughVersion: version)
    }

    /// The sequence the signed index would carry now.
    package func publishedSequence() async throws -> UInt64 {
        try await store.publishedState(of: []).sequence
    }

    package func collections() async throws -> [CollectionHead] {
        try await store.collections()
    }

    package func stop() async {
        await store.close()
        cluster?.stop()
    }

    /// Runs `body`, then stops the database whatever happened: a PostgreSQL store released
    /// with its connections open traps, so a failure must still stop it to be reported.
    ///
    /// ```swift
    /// try await database.stopping { try await TestServer.start(database: database.url).stopping { … } }
    /// ```
    package func stopping<T>(after body: () async throws -> T) async throws -> T {
        try await finally(body, then: stop)
    }

    /// A fresh store of `backend` in a temporary directory for `body`, stopped and removed
    /// after it whatever happened: the set-up a store-level test repeats.
    ///
    /// ```swift
    /// try await TestDatabase.with(backend) { store in try await store.importText(…, collection: "items") }
    /// ```
    package static func with<T>(_ backend: TestBackend, _ body: (TestDatabase) async throws -> T) async throws -> T {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await make(backend, in: dir)
        return try await store.stopping { try await body(store) }
    }
}
