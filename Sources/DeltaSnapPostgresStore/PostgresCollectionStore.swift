import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import Logging
import NIOConcurrencyHelpers

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
/// let api = try await DeltaSnapAPI(store: store)   // owns it: `api.shutdown()` closes it
/// ```
public final class PostgresCollectionStore: CollectionStore {
    let primary: PostgresDatabase
    let reader: PostgresDatabase
    private let logger: Logger

    /// How long to keep asking a lagging replica for a commit the primary announced.
    static let replicaCatchUpLimit: Duration = .seconds(30)

    /// The highest publication sequence the watcher has read (from the opening on): every
    /// change after it is reported, so no head read on demand since can go stale unnoticed.
    private let seen: ChangeFeedPosition

    init(primary: PostgresDatabase, reader: PostgresDatabase, logger: Logger, openedAt: UInt64) {
        self.primary = primary
        self.reader = reader
        self.logger = logger
        seen = ChangeFeedPosition(openedAt)
    }

    /// Connects to `url` (and `readReplica`, a streaming replica, when given); creates the
    /// schema on first use.
    public static func connect(
        url: String, readReplica: String? = nil, configuration: StoreConfiguration = StoreConfiguration(),
        logger: Logger = Logger(label: "deltasnap.postgres")
    ) async throws -> PostgresCollectionStore {
        let primary = try await PostgresDatabase.connect(url, configuration: configuration, logger: logger)
        do {
            guard let readReplica else {
                return PostgresCollectionStore(primary: primary, reader: primary, logger: logger, openedAt: try await primary.latestPublished())
            }
            let reader = try await PostgresDatabase.connect(readReplica, configuration: configuration, migrate: false, logger: logger)
            return PostgresCollectionStore(primary: primary, reader: reader, logger: logger, openedAt: (try? await reader.latestPublished()) ?? 0)
        } catch {
            await primary.close()
            throw error
        }
    }

    package func collections() async throws -> [CollectionHead] {
        try await reader.collections()
    }

    package func partitions(of collection: String) async throws -> [String] {
        try await reader.partitionPaths(of: collection)
    }

    package func partitions(of collection: String, keysStartingWith prefix: String, limit: Int) async throws -> [String] {
        try await reader.partitionPaths(of: collection, keysStartingWith: prefix, limit: limit)
    }

    package func head(of collection: String) async throws -> CollectionHead? {
        try await reader.head(of: collection)
    }

    package func heads(of names: [String]) async throws -> [CollectionHead] {
        try await reader.heads(of: names)
    }

    /// A session advisory lock on the primary, named by `name`'s hash, held on a connection of
    /// its own while `body` runs (on others): every instance of the store waits for it.
    package func exclusively<T: Sendable>(_ name: String, _ body: @Sendable () async throws -> T) async throws -> T {
        try await primary.exclusively(name, body)
    }

    package func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource {
        try await reader.openRecords(in: collection, after: version)
    }

    package func record(_ id: String, in collection: String) async throws -> Record? {
        try await reader.visibleRecord(id, in: collection)
    }

    package func openPage(of collection: String, after id: String?, limit: Int) async throws -> any RecordSource {
        try await reader.openPage(of: collection, after: id, limit: limit)
    }

    package func versions(of collection: String, limit: Int) async throws -> [(version: UInt64, committedAt: Int64)] {
        try await reader.versions(of: collection, limit: limit)
    }

    package func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        try await reader.firstVersion(in: collection, committedAtOrAfter: seconds)
    }

    /// From the primary: the index's sequence must never go down, whichever instance (and
    /// replica) a client asks; a target a lagging replica cannot serve yet is a retryable 404.
    package func publishedState(of names: [String]) async throws -> PublishedState {
        try await primary.publishedState(of: names)
    }

    /// One query reads every head named (`statedAt` is not needed: the rows never leave the server).
    package func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64?) async throws -> PublishedState {
        try await primary.publishedState(of: names, confirming: known)
    }

    package func sourcePosition(of follower: String) async throws -> String? {
        try await primary.sourcePosition(of: follower)
    }

    package func forgetSourcePosition(of follower: String) async throws -> Bool {
        try await primary.forgetSourcePosition(of: follower)
    }

    package func followers() async throws -> [SourceFollowerStatus] {
        try await primary.followers()
    }

    package func recordSourceLag(of follower: String, bytes: Int64, at: Int64) async throws {
        try await primary.recordSourceLag(of: follower, bytes: bytes, at: at)
    }

    package func commit(_ write: StoreWrite, each: @escaping @Sendable (StoreWrite.Outcome) -> Void) async throws {
        try await primary.commit(write, each: each)
    }

    package func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry] {
        try await reader.history(of: id, in: collection, limit: limit)
    }

    package func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int {
        try await primary.compact(collection, throughVersion: version)
    }

    /// Listens on the primary; on each commit reads that collection's head from the reader,
    /// asking a lagging replica again every 20 ms until it has the commit. On (re)connecting,
    /// and every `10 × interval` (at least a second) regardless, it reads every head changed since it last looked
    /// (the safety net for a notification lost between a drop and the next LISTEN).
    package func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                var backoff: Duration = .milliseconds(50)
                while !Task.isCancelled {
                    let started = ContinuousClock.now
                    do {
                        try await primary.listenForCommits(
                            onListening: { [self] in
                                // Anything committed while no one listened is in this read.
                                await catchUp(onChange)
                            },
                            onCommit: { [self] collection, version in
                                // A commit of many partitions names none: read what changed.
                                if collection == "*" { return await catchUp(onChange) }
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
                    do { try await Task.sleep(for: max(interval * 10, .seconds(1))) } catch { return }
                    await catchUp(onChange)
                }
            }
            await group.waitForAll()
        }
    }

    private func catchUp(collection: String, version: UInt64, onChange: @Sendable ([CollectionHead]) -> Void) async {
        let deadline = ContinuousClock.now + Self.replicaCatchUpLimit
        while !Task.isCancelled {
            guard let head = try? await reader.head(of: collection) else {
                if ContinuousClock.now > deadline { return }
                try? await Task.sleep(for: .milliseconds(20))
                continue
            }
            onChange([head])
            if head.version >= version || ContinuousClock.now > deadline { return }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Reports every head changed since the last read (the first adds every collection
    /// that is not a partition).
    private func catchUp(_ onChange: @Sendable ([CollectionHead]) -> Void) async {
        let (from, first) = seen.current
        guard let changed = try? await reader.heads(publishedAfter: from) else { return }
        let collections = first ? ((try? await reader.collections()) ?? []) : []
        seen.advance(to: changed.through)
        onChange(collections + changed.heads)
    }

    package func storeAttachment(_ reference: AttachmentReference, from next: () async throws -> [UInt8]?) async throws {
        try await primary.storeAttachment(reference, from: next)
    }

    package func attachmentSize(_ sha256: String) async throws -> UInt64? {
        // From the primary: a blob just stored is there before any replica has it.
        try await primary.attachmentSize(sha256)
    }

    package func noteAttachmentUpload(_ sha256: String, into collection: String) async throws {
        try await primary.noteAttachmentUpload(sha256, into: collection)
    }

    package func attachmentUploaded(_ sha256: String, into collection: String) async throws -> Bool {
        // From the primary, as the upload it follows.
        try await primary.attachmentUploaded(sha256, into: collection)
    }

    package func collections(referringTo sha256: String, limit: Int) async throws -> [String] {
        // From the primary: a record just committed proves the bytes to its readers at once.
        try await primary.collections(referringTo: sha256, limit: limit)
    }

    package func attachment(_ sha256: String, in collection: String) async throws -> AttachmentReference? {
        guard AttachmentReference.isSHA256(sha256) else { return nil }
        // From the reader, as the records that refer to it: a blob is committed before them.
        return try await reader.attachment(sha256, in: collection)
    }

    package func readAttachment(_ sha256: String, range: Range<UInt64>, _ body: ([UInt8]) async throws -> Void) async throws {
        try await reader.readAttachment(sha256, range: range, body)
    }

    // Uploads on the primary: each append must see the bytes the last one made durable.
    package func createUpload(_ upload: AttachmentUpload) async throws {
        try await primary.createUpload(upload)
    }

    package func upload(_ token: String) async throws -> AttachmentUpload? {
        guard AttachmentUpload.isToken(token) else { return nil }
        return try await primary.upload(token)
    }

    package func appendUpload(_ token: String, at offset: UInt64, from next: () async throws -> [UInt8]?) async throws -> UInt64 {
        try await primary.appendUpload(token, at: offset, from: next)
    }

    package func completeUpload(_ token: String) async throws {
        try await primary.completeUpload(token)
    }

    package func cancelUpload(_ token: String) async throws -> Bool {
        guard AttachmentUpload.isToken(token) else { return false }
        return try await primary.cancelUpload(token)
    }

    package func expireUploads(begunBefore seconds: Int64) async throws -> Int {
        try await primary.expireUploads(begunBefore: seconds)
    }

    package func collectAttachmentGarbage(unreferencedFor grace: Int64, now: Int64) async throws -> AttachmentGarbage {
        try await primary.collectAttachmentGarbage(unreferencedFor: grace, now: now)
    }

    public func close() async {
        await primary.close()
        if reader !== primary { await reader.close() }
    }
}

/// Where a watcher is in the stream of changes: the highest publication sequence it read,
/// and whether it has reported anything yet. Shared by the watcher's tasks.
private final class ChangeFeedPosition: Sendable {
    private let state: NIOLockedValueBox<(sequence: UInt64, reported: Bool)>

    init(_ sequence: UInt64) {
        state = NIOLockedValueBox((sequence, false))
    }

    var current: (sequence: UInt64, first: Bool) { state.withLockedValue { ($0.sequence, !$0.reported) } }

    func advance(to next: UInt64) {
        state.withLockedValue { state in
            state.sequence = max(state.sequence, next)
            state.reported = true
        }
    }
}
