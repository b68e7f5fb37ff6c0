import DeltaSnapCore
import DeltaSnapPostgres
import DeltaSnapStore
import Foundation

/// The two stores a server can run on, for tests that run on both.
public enum TestBackend: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite, postgres
    public var description: String { rawValue }
}

/// A store of either backend, fresh for one test: an SQLite file, or a throwaway PostgreSQL
/// cluster on a free loopback port (stopped by PID in ``stop()``).
///
/// ```swift
/// let database = try await TestDatabase.make(.postgres, in: dir)
/// defer { database.stop() }
/// let server = try await TestServer.start(databasePath: database.url)
/// ```
public final class TestDatabase: @unchecked Sendable {
    public let backend: TestBackend
    /// What `--db` takes: the SQLite path or the PostgreSQL URL.
    public let url: String
    public let cluster: PostgresCluster?
    private let postgres: PostgresStore?
    private let configuration: StoreConfiguration

    private init(backend: TestBackend, url: String, cluster: PostgresCluster?, postgres: PostgresStore?, configuration: StoreConfiguration) {
        self.backend = backend
        self.configuration = configuration
        self.url = url
        self.cluster = cluster
        self.postgres = postgres
    }

    public static func make(_ backend: TestBackend, in dir: TemporaryDirectory, configuration: StoreConfiguration = StoreConfiguration()) async throws -> TestDatabase {
        switch backend {
        case .sqlite:
            let path = dir.file("s.sqlite")
            _ = try Store(path: path, configuration: configuration)
            return TestDatabase(backend: backend, url: path, cluster: nil, postgres: nil, configuration: configuration)
        case .postgres:
            let cluster = try PostgresCluster.start(in: dir.path)
            do {
                let store = try await PostgresStore.connect(cluster.url, configuration: configuration)
                return TestDatabase(backend: backend, url: cluster.url, cluster: cluster, postgres: store, configuration: configuration)
            } catch {
                cluster.stop()
                throw error
            }
        }
    }

    /// A handle on a running cluster (after a restart), owning nothing: ``stop()`` closes
    /// the connection only.
    public static func reconnect(to cluster: PostgresCluster) async throws -> TestDatabase {
        TestDatabase(backend: .postgres, url: cluster.url, cluster: nil, postgres: try await PostgresStore.connect(cluster.url), configuration: StoreConfiguration())
    }

    /// Imports NDJSON text straight into the store (another process's import, as far as a
    /// server can tell).
    @discardableResult
    public func importText(_ text: String, collection: String, replace: Bool = false) async throws -> WriteResult {
        if let postgres {
            return try await postgres.importRecords(from: RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "test"), into: collection, replace: replace)
        }
        return try Fixtures.importText(text, into: try Store(path: url, configuration: configuration), collection: collection, replace: replace)
    }

    public func head(of collection: String) async throws -> CollectionHead? {
        if let postgres { return try await postgres.head(of: collection) }
        return try Store(path: url, readOnly: true).head(of: collection)
    }

    /// The visible records as `export` prints them (NDJSON, id order).
    public func export(_ collection: String) async throws -> String {
        if let postgres {
            var out = ""
            try await postgres.forEachVisibleRecord(in: collection) { out += String(decoding: $0, as: UTF8.self) + "\n" }
            return out
        }
        return try Fixtures.export(try Store(path: url, readOnly: true), collection)
    }

    /// Every record changed after `version` (tombstones included), canonical bytes, id order.
    public func changes(after version: UInt64, in collection: String) async throws -> [String] {
        if let postgres {
            let cursor = try await postgres.openRecords(in: collection, after: version)
            var out: [String] = []
            while try await cursor.next({ out.append(String(decoding: $0, as: UTF8.self)) }) {}
            await cursor.close()
            return out
        }
        return try Store(path: url, readOnly: true).read { reader in
            var out: [String] = []
            try reader.forEachChange(in: collection, after: version) { out.append(String(decoding: $0, as: UTF8.self)) }
            return out
        }
    }

    /// Deletes tombstones up to `version` and raises the floor; how many went.
    @discardableResult
    public func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int {
        if let postgres { return try await postgres.compact(collection, throughVersion: version) }
        return try Store(path: url, configuration: configuration).compact(collection, throughVersion: version)
    }

    /// The sequence the signed index would carry now.
    public func publishedSequence() async throws -> UInt64 {
        if let postgres { return try await postgres.publishedState().sequence }
        return try Store(path: url, readOnly: true).read { try $0.publishedState().sequence }
    }

    public func collections() async throws -> [CollectionHead] {
        if let postgres { return try await postgres.collections() }
        return try Store(path: url, readOnly: true).collections()
    }

    public func stop() async {
        await postgres?.close()
        cluster?.stop()
    }
}
