import DeltaSnapPostgresStore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import Logging

/// Opening a store where a `--db` value points: the one place that knows every kind of store
/// (SQLite, PostgreSQL). The server takes any `CollectionStore`; this is where the CLI (and
/// the tests) pick the database, so nothing else compares prefixes.
///
/// An app that embeds the server on SQLite needs none of this (and no PostgreSQL client):
/// it opens a `SQLiteCollectionStore` itself.
///
/// ```swift
/// let store = try await StoreLocation("deltasnap.sqlite").open()
/// defer { Task { await store.close() } }
/// ```
extension StoreLocation {
    /// Opens the store at `location`, creating its schema on first use. `configuration`
    /// pins an epoch or commit time (tests, reproducible builds); by default it is read from
    /// the environment (`DELTASNAP_EPOCH`, `DELTASNAP_COMMIT_TIME`). `readOnly` (for reading
    /// commands: export, bake) creates no SQLite file where there was none.
    /// `maximumReaders`: SQLite read transactions open at once (a server sizes it to its
    /// open-file limit: three descriptors each).
    package func open(
        configuration: StoreConfiguration = .fromEnvironment(), readOnly: Bool = false, maximumReaders: Int = 64,
        logger: Logger = Logger(label: "deltasnap.store")
    ) async throws -> any CollectionStore {
        switch self {
        case .sqlite(let path):
            try SQLiteCollectionStore(path: path, configuration: configuration, readOnly: readOnly, maximumReaders: maximumReaders)
        case .postgres(let url, let readReplica):
            try await PostgresCollectionStore.connect(url: url, readReplica: readReplica, configuration: configuration, logger: logger)
        }
    }

    /// Opens the store `text` names (what `--db` takes), runs `body` with it, and closes it
    /// whatever `body` does: the shape of every CLI command that works on a store.
    package static func withStore<T>(
        _ text: String, readReplica: String? = nil, configuration: StoreConfiguration = .fromEnvironment(), readOnly: Bool = false,
        _ body: (any CollectionStore) async throws -> T
    ) async throws -> T {
        let store = try await StoreLocation(text, readReplica: readReplica).open(configuration: configuration, readOnly: readOnly)
        do {
            let result = try await body(store)
            await store.close()
            return result
        } catch {
            await store.close()
            throw error
        }
    }
}
