import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import Logging

/// The store on a shared PostgreSQL server: any number of `serve` instances use it at once
/// and keep nothing of their own but caches, so a client may ask any of them.
///
/// Writes go to `primary`; reads to `reader`, which is the primary or one of its streaming
/// replicas. Commits are heard through `LISTEN`/`NOTIFY` on the primary (a replica cannot
/// notify); a replica that has not replayed a notified commit yet is asked again until it
/// has, and a slow poll covers a notification lost while the connection was down.
///
/// ```swift
/// let store = try await PostgresCollectionStore.connect(url: "postgres://deltasnap@127.0.0.1:5432/app")
/// let result = try await store.importBatch(Array(#"{"id":"AD","name":"Andorra"}"#.utf8), into: "countries")
/// await store.close()
/// ```
public final class PostgresCollectionStore: CollectionStore {
    let primary: PostgresStore
    let reader: PostgresStore
    private let logger: Logger

    /// How long to keep asking a lagging replica for a commit the primary announced.
    static let replicaCatchUpLimit: Duration = .seconds(30)

    init(primary: PostgresStore, reader: PostgresStore, logger: Logger) {
        self.primary = primary
        self.reader = reader
        self.logger = logger
    }

    /// Connects to `url` (and `readReplica`, a streaming replica, when given); creates the
    /// schema on first use.
    public static func connect(
        url: String, readReplica: String? = nil, configuration: StoreConfiguration = StoreConfiguration(),
        logger: Logger = Logger(label: "deltasnap.postgres")
    ) async throws -> PostgresCollectionStore {
        let primary = try await PostgresStore.connect(url, configuration: configuration, logger: logger)
        guard let readReplica else { return PostgresCollectionStore(primary: primary, reader: primary, logger: logger) }
        do {
            let reader = try await PostgresStore.connect(readReplica, configuration: configuration, migrate: false, logger: logger)
            return PostgresCollectionStore(primary: primary, reader: reader, logger: logger)
        } catch {
            await primary.close()
            throw error
        }
    }

    public func collections() async throws -> [CollectionHead] {
        try await reader.collections()
    }

    public func head(of collection: String) async throws -> CollectionHead? {
        try await reader.head(of: collection)
    }

    public func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource {
        try await reader.openRecords(in: collection, after: version)
    }

    public func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        try await reader.firstVersion(in: collection, committedAtOrAfter: seconds)
    }

    /// From the primary: the index's sequence must never go down, whichever instance (and
    /// replica) a client asks; a target a lagging replica cannot serve yet is a retryable 404.
    public func publishedState(of names: [String]) async throws -> PublishedState {
        try await primary.publishedState(of: names)
    }

    /// One transaction per partition (a batched path like SQLite's is still to come).
    public func importPartitions(_ partitions: [PartitionRecords], replace: Bool) async throws -> [WriteResult] {
        try await importEachPartition(partitions, replace: replace)
    }

    public func importRecords(
        from stream: RecordStream, into collection: String, replace: Bool, progress: (@Sendable (Int) -> Void)?
    ) async throws -> WriteResult {
        try await primary.importRecords(from: stream, into: collection, replace: replace, progress: progress)
    }

    public func push(
        _ mutations: [ParsedMutation], from client: String, user: String?, to collection: String, retention: PushRetention, merge: MergePolicy
    ) async throws -> PushOutcome {
        try await primary.push(mutations, from: client, user: user, to: collection, retention: retention, merge: merge)
    }

    public func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry] {
        try await reader.history(of: id, in: collection, limit: limit)
    }

    public func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int {
        try await primary.compact(collection, throughVersion: version)
    }

    /// Listens on the primary; on each commit reloads the heads from the reader, asking a
    /// lagging replica again every 20 ms until it has the commit. On a lost connection it
    /// reconnects (with back-off up to 2 s); every `10 × interval` it reloads regardless.
    public func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                var backoff: Duration = .milliseconds(50)
                while !Task.isCancelled {
                    let started = ContinuousClock.now
                    do {
                        try await primary.listenForCommits(
                            onListening: { [self] in
                                // Anything committed while no one listened is in this reload.
                                if let heads = try? await reader.collections() { onChange(heads) }
                            },
                            onCommit: { [self] collection, version in
                                await catchUp(collection: collection, version: version, onChange: onChange)
                            })
                    } catch {
                        if Task.isCancelled { return }
                        logger.warning("lost the PostgreSQL notification connection; reconnecting", metadata: ["error": "\(error)"])
                    }
                    // A connection that held for a while starts the back-off afresh.
                    backoff = ContinuousClock.now - started > .seconds(5) ? .milliseconds(50) : min(backoff * 2, .seconds(2))
                    try? await Task.sleep(for: backoff)
                }
            }
            group.addTask { [self] in
                // The safety net: a notification lost between a drop and the next LISTEN.
                while !Task.isCancelled {
                    do { try await Task.sleep(for: interval * 10) } catch { return }
                    if let heads = try? await reader.collections() { onChange(heads) }
                }
            }
            await group.waitForAll()
        }
    }

    private func catchUp(collection: String, version: UInt64, onChange: @Sendable ([CollectionHead]) -> Void) async {
        let deadline = ContinuousClock.now + Self.replicaCatchUpLimit
        while !Task.isCancelled {
            guard let heads = try? await reader.collections() else { return }
            onChange(heads)
            let seen = heads.first { $0.name == collection }?.version ?? 0
            if seen >= version || ContinuousClock.now > deadline { return }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    public func close() async {
        await primary.close()
        if reader !== primary { await reader.close() }
    }
}
