import DeltaSnapCore
import DeltaSnapPostgres
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
final class PostgresBackend: ServerBackend {
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

    /// Connects to `url` (and `readURL`, a replica, when given); creates the schema on first use.
    static func connect(url: String, readURL: String?, logger: Logger) async throws -> PostgresBackend {
        let primary = try await PostgresStore.connect(url, configuration: .fromEnvironment(), logger: logger)
        guard let readURL else { return PostgresBackend(primary: primary, reader: primary, logger: logger) }
        do {
            let reader = try await PostgresStore.connect(readURL, configuration: .fromEnvironment(), migrate: false, logger: logger)
            return PostgresBackend(primary: primary, reader: reader, logger: logger)
        } catch {
            await primary.close()
            throw error
        }
    }

    func collections() async throws -> [CollectionHead] {
        try await answering { try await reader.collections() }
    }

    func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource {
        try await answering { PostgresRecordSource(cursor: try await reader.openRecords(in: collection, after: version)) }
    }

    func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        try await answering { try await reader.firstVersion(in: collection, committedAtOrAfter: seconds) }
    }

    /// From the primary: the index's sequence must never go down, whichever instance (and
    /// replica) a client asks; a target a lagging replica cannot serve yet is a retryable 404.
    func publishedState(including included: @escaping @Sendable (String) -> Bool) async throws -> (sequence: UInt64, entries: [SignedIndex.Entry]) {
        try await answering { try await primary.publishedState(including: included) }
    }

    func write(_ records: [Record], to collection: String) async throws -> WriteResult {
        try await answering { try await primary.importRecords(from: RecordStream(records: records, name: "request"), into: collection) }
    }

    func importBatch(_ body: [UInt8], into collection: String, replace: Bool) async throws -> WriteResult {
        try await answering {
            try await primary.importRecords(from: RecordStream(source: ChunkSources.bytes(body), name: "body"), into: collection, replace: replace)
        }
    }

    func push(_ mutations: [ParsedMutation], from client: String, user: String?, to collection: String, retention: PushRetention) async throws -> PushOutcome {
        try await answering { try await primary.push(mutations, from: client, user: user, to: collection, retention: retention) }
    }

    func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry] {
        try await answering { try await reader.history(of: id, in: collection, limit: limit) }
    }

    func compact(_ collection: String, policy: CompactionPolicy) async throws -> CompactionResult? {
        try await answering { try await primary.compact(collection, policy: policy) }
    }

    /// Listens on the primary; on each commit reloads the heads from the reader, asking a
    /// lagging replica again every 20 ms until it has the commit. On a lost connection it
    /// reconnects (with back-off up to 2 s); every `10 × interval` it reloads regardless.
    func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async {
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

    func shutdown() async {
        await primary.close()
        if reader !== primary { await reader.close() }
    }

    /// Runs `body`, answering what the database could not do as an HTTP error: out of reach
    /// (restarting, shutting down) is `503` with `Retry-After`, never a `500`.
    private func answering<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PostgresStoreError {
            throw Self.apiError(error)
        }
    }

    static func apiError(_ error: PostgresStoreError) -> any Error {
        switch error {
        case .unreachable:
            return APIError(.serviceUnavailable, "database_unavailable", "the database is out of reach (\(error)); retry shortly", headers: [.retryAfter: "1"])
        case .unknownCollection(let name):
            return APIError.unknownCollection(name)
        case .badURL, .newerSchema, .database:
            return error
        }
    }
}

/// A ``PostgresRecordCursor`` as the server's record source.
final class PostgresRecordSource: RecordSource {
    let cursor: PostgresRecordCursor
    var head: CollectionHead { cursor.head }
    var count: Int { cursor.count }

    init(cursor: PostgresRecordCursor) {
        self.cursor = cursor
    }

    func next(_ body: (UnsafeRawBufferPointer) throws -> Void) async throws -> Bool {
        do {
            return try await cursor.next(body)
        } catch let error as PostgresStoreError {
            throw PostgresBackend.apiError(error)
        }
    }

    func close() async {
        await cursor.close()
    }
}
