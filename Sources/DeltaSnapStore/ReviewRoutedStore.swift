import DeltaSnapCore
import DeltaSnapTrust

/// A store as a writer of reviewed collections sees it (docs/PROTOCOL.md §13): every path of
/// a reviewed collection is its workspace — what it reads (a record, the partitions, a
/// collection's records) and what it writes. What a source follower runs on, so its writes,
/// like the server's and `deltasnap import`'s, reach no reader before a review.
///
/// ```swift
/// let routed = try await ReviewRoutedStore.wrapping(store)   // the store itself when nothing is reviewed
/// try await routed.importPartitions(partitions, replace: false, recording: position)
/// ```
public struct ReviewRoutedStore: CollectionStore {
    public let base: any CollectionStore
    public let settings: [String: ReviewSettings]

    public init(_ base: any CollectionStore, settings: [String: ReviewSettings]) {
        self.base = base
        self.settings = settings
    }

    /// `store` routed by the review settings it holds; `store` itself when nothing is reviewed.
    public static func wrapping(_ store: any CollectionStore) async throws -> any CollectionStore {
        let settings = try await store.reviewSettings()
        return settings.isEmpty ? store : ReviewRoutedStore(store, settings: settings)
    }

    /// Where `path` is for this writer: its workspace when its collection is reviewed.
    public func target(_ path: String) -> String {
        ReviewPaths.target(of: path, settings: settings)
    }

    /// Prepares the workspace of each path (a copy of what is published) before a write that
    /// cannot prepare it on the way (a streamed import). Returns the targets.
    @discardableResult
    public func prepare(_ paths: [String]) async throws -> [String] {
        var targets: [String] = []
        for path in paths {
            targets.append(target(path) == path ? path : try await base.prepareWorkspace(of: path))
        }
        return targets
    }

    /// Prepares the workspaces of every partition `collection` has published (and its own):
    /// a follower that starts on a reviewed collection streams into them.
    public func prepareAll(of collection: String) async throws {
        guard settings[collection] != nil else { return }
        try await prepare([collection] + (try await base.partitions(of: collection)))
    }

    // MARK: - Routed

    public func head(of collection: String) async throws -> CollectionHead? { try await base.head(of: target(collection)) }
    public func record(_ id: String, in collection: String) async throws -> Record? { try await base.record(id, in: target(collection)) }
    public func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource {
        try await base.openRecords(in: target(collection), after: version)
    }
    public func openPage(of collection: String, after id: String?, limit: Int) async throws -> any RecordSource {
        try await base.openPage(of: target(collection), after: id, limit: limit)
    }
    public func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        try await base.firstVersion(in: target(collection), committedAtOrAfter: seconds)
    }
    public func versions(of collection: String, limit: Int) async throws -> [(version: UInt64, committedAt: Int64)] {
        try await base.versions(of: target(collection), limit: limit)
    }
    public func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry] {
        try await base.history(of: id, in: target(collection), limit: limit)
    }

    /// The partitions of `collection` as this writer sees them: a reviewed one's workspaces,
    /// named as the partitions they will be published as.
    public func partitions(of collection: String) async throws -> [String] {
        guard settings[collection] != nil else { return try await base.partitions(of: collection) }
        let prefix = ReviewPaths.workspace(of: collection) + ":"
        return try await base.partitions(of: ReviewPaths.workspaceCollection).compactMap { path in
            guard path.hasPrefix(prefix) else { return nil }
            return ReviewPaths.published(ofWorkspace: path)
        }
    }

    public func importRecords(from stream: RecordStream, into collection: String, replace: Bool, progress: (@Sendable (Int) -> Void)?) async throws -> WriteResult {
        let into = try await prepare([collection])[0]
        return try await base.importRecords(from: stream, into: into, replace: replace, progress: progress)
    }

    public func importPartitions(_ partitions: [PartitionRecords], replace: Bool, recording position: SourcePosition?) async throws -> [WriteResult] {
        try await base.importPartitions(try await routed(partitions), replace: replace, recording: position)
    }

    /// Review's own writes name the paths they mean: none is routed.
    public func publish(_ publication: ReviewPublication) async throws -> [WriteResult] {
        try await base.publish(publication)
    }

    public func importTransactions(_ transactions: [StoreTransaction]) async throws -> [[WriteResult]] {
        var routedTransactions: [StoreTransaction] = []
        for transaction in transactions {
            routedTransactions.append(StoreTransaction(partitions: try await routed(transaction.partitions), position: transaction.position))
        }
        return try await base.importTransactions(routedTransactions)
    }

    /// Streams are renamed as they are read; their workspaces must exist already (``prepare(_:)``):
    /// a stream is read on the store's writer, where nothing can be waited for.
    public func importStreams(
        _ next: @escaping @Sendable () throws -> PathRecords?, replace: Bool, recording position: SourcePosition?,
        each: @escaping @Sendable (WriteResult) -> Void
    ) async throws {
        let settings = settings
        let routed = { @Sendable () throws -> PathRecords? in
            guard var part = try next() else { return nil }
            part.path = ReviewPaths.target(of: part.path, settings: settings)
            return part
        }
        try await base.importStreams(routed, replace: replace, recording: position, each: each)
    }

    public func push(
        _ mutations: [ParsedMutation], from client: String, user: String?, to collection: String, retention: PushRetention, merge: MergePolicy,
        attachments: AttachmentProof
    ) async throws -> PushOutcome {
        let into = try await prepare([collection])[0]
        return try await base.push(mutations, from: client, user: user, to: into, retention: retention, merge: merge, attachments: attachments)
    }

    private func routed(_ partitions: [PartitionRecords]) async throws -> [PartitionRecords] {
        let targets = try await prepare(partitions.map(\.path))
        return zip(partitions, targets).map { PartitionRecords(path: $1, records: $0.records) }
    }

    // MARK: - As they are

    public func collections() async throws -> [CollectionHead] { try await base.collections() }
    public func partitions(of collection: String, keysStartingWith prefix: String, limit: Int) async throws -> [String] {
        try await base.partitions(of: collection, keysStartingWith: prefix, limit: limit)
    }
    public func publishedState(of names: [String]) async throws -> PublishedState { try await base.publishedState(of: names) }
    public func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64?) async throws -> PublishedState {
        try await base.publishedState(of: names, confirming: known, statedAt: statedAt)
    }
    public func sourcePosition(of follower: String) async throws -> String? { try await base.sourcePosition(of: follower) }
    public func forgetSourcePosition(of follower: String) async throws -> Bool { try await base.forgetSourcePosition(of: follower) }
    public func followers() async throws -> [SourceFollowerStatus] { try await base.followers() }
    public func recordSourceLag(of follower: String, bytes: Int64, at: Int64) async throws {
        try await base.recordSourceLag(of: follower, bytes: bytes, at: at)
    }
    public func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int { try await base.compact(collection, throughVersion: version) }
    public func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async {
        await base.watchForChanges(every: interval, onChange: onChange)
    }
    public func storeAttachment(_ reference: AttachmentReference, from next: () async throws -> [UInt8]?) async throws {
        try await base.storeAttachment(reference, from: next)
    }
    public func attachmentSize(_ sha256: String) async throws -> UInt64? { try await base.attachmentSize(sha256) }
    public func noteAttachmentUpload(_ sha256: String, into collection: String) async throws {
        try await base.noteAttachmentUpload(sha256, into: collection)
    }
    public func attachmentUploaded(_ sha256: String, into collection: String) async throws -> Bool {
        try await base.attachmentUploaded(sha256, into: collection)
    }
    public func collections(referringTo sha256: String, limit: Int) async throws -> [String] {
        try await base.collections(referringTo: sha256, limit: limit)
    }
    public func attachment(_ sha256: String, in collection: String) async throws -> AttachmentReference? { try await base.attachment(sha256, in: collection) }
    public func readAttachment(_ sha256: String, range: Range<UInt64>, _ body: ([UInt8]) async throws -> Void) async throws {
        try await base.readAttachment(sha256, range: range, body)
    }
    public func createUpload(_ upload: AttachmentUpload) async throws { try await base.createUpload(upload) }
    public func upload(_ token: String) async throws -> AttachmentUpload? { try await base.upload(token) }
    public func appendUpload(_ token: String, at offset: UInt64, from next: () async throws -> [UInt8]?) async throws -> UInt64 {
        try await base.appendUpload(token, at: offset, from: next)
    }
    public func completeUpload(_ token: String) async throws { try await base.completeUpload(token) }
    public func cancelUpload(_ token: String) async throws -> Bool { try await base.cancelUpload(token) }
    public func expireUploads(begunBefore seconds: Int64) async throws -> Int { try await base.expireUploads(begunBefore: seconds) }
    public func collectAttachmentGarbage(unreferencedFor grace: Int64, now: Int64) async throws -> AttachmentGarbage {
        try await base.collectAttachmentGarbage(unreferencedFor: grace, now: now)
    }
    public func exclusively<T: Sendable>(_ name: String, _ body: @Sendable () async throws -> T) async throws -> T {
        try await base.exclusively(name, body)
    }
    public func close() async { await base.close() }
}
