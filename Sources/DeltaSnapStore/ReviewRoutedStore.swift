import DeltaSnapCore
import DeltaSnapTrust

/// A store as a writer of reviewed collections sees it (docs/PROTOCOL.md §13): every path of
/// a reviewed collection is its workspace — what it reads (a record, the partitions, a
/// collection's records) and what it writes. What a source follower runs on, so its writes,
/// like the server's and `deltasnap import`'s, reach no reader before a review.
///
/// ```swift
/// let routed = try await ReviewRoutedStore.wrapping(store)   // the store itself when nothing is reviewed
/// try await routed.importPartitions(partitions, replace: false, recording: position)   // into workspaces
/// ```
package struct ReviewRoutedStore: CollectionStore {
    package let base: any CollectionStore
    package let settings: [String: ReviewSettings]

    package init(_ base: any CollectionStore, settings: [String: ReviewSettings]) {
        self.base = base
        self.settings = settings
    }

    /// `store` routed by the review settings it holds; `store` itself when nothing is reviewed.
    package static func wrapping(_ store: any CollectionStore) async throws -> any CollectionStore {
        let settings = try await store.reviewSettings()
        return settings.isEmpty ? store : ReviewRoutedStore(store, settings: settings)
    }

    /// Where `path` is for this writer: its workspace when its collection is reviewed.
    package func target(_ path: String) -> String {
        ReviewPaths.target(of: path, settings: settings)
    }

    /// Prepares the workspace of each path (a copy of what is published) before a write that
    /// cannot prepare it on the way (a streamed import). Returns the targets.
    @discardableResult
    package func prepare(_ paths: [String]) async throws -> [String] {
        var targets: [String] = []
        for path in paths {
            targets.append(target(path) == path ? path : try await base.prepareWorkspace(of: path))
        }
        return targets
    }

    /// Prepares the workspaces of every partition `collection` has published (and its own):
    /// a follower that starts on a reviewed collection streams into them.
    package func prepareAll(of collection: String) async throws {
        guard settings[collection] != nil else { return }
        try await prepare([collection] + (try await base.partitions(of: collection)))
    }

    // MARK: - Routed

    package func head(of collection: String) async throws -> CollectionHead? { try await base.head(of: target(collection)) }
    package func record(_ id: String, in collection: String) async throws -> Record? { try await base.record(id, in: target(collection)) }
    package func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource {
        try await base.openRecords(in: target(collection), after: version)
    }
    package func openPage(of collection: String, after id: String?, limit: Int) async throws -> any RecordSource {
        try await base.openPage(of: target(collection), after: id, limit: limit)
    }
    package func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        try await base.firstVersion(in: target(collection), committedAtOrAfter: seconds)
    }
    package func versions(of collection: String, limit: Int) async throws -> [(version: UInt64, committedAt: Int64)] {
        try await base.versions(of: target(collection), limit: limit)
    }
    package func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry] {
        try await base.history(of: id, in: target(collection), limit: limit)
    }

    /// The partitions of `collection` as this writer sees them: a reviewed one's workspaces,
    /// named as the partitions they will be published as.
    package func partitions(of collection: String) async throws -> [String] {
        guard settings[collection] != nil else { return try await base.partitions(of: collection) }
        let prefix = ReviewPaths.workspace(of: collection) + ":"
        return try await base.partitions(of: ReviewPaths.workspaceCollection).compactMap { path in
            guard path.hasPrefix(prefix) else { return nil }
            return ReviewPaths.published(ofWorkspace: path)
        }
    }

    /// Every write routed here, once: held paths, a collection's import and a push go to
    /// their workspaces (prepared first); streamed paths are renamed as they are read — their
    /// workspaces must exist already (``prepare(_:)``): a stream is read on the store's
    /// writer, where nothing can be waited for. An expected version is of the path this
    /// writer reads (its workspace). Review's own publications name the paths they mean: none
    /// is routed.
    package func commit(_ write: StoreWrite, each: @escaping @Sendable (StoreWrite.Outcome) -> Void) async throws {
        var routedWrite = write
        routedWrite.steps = []
        for step in write.steps {
            switch step {
            case .paths(let partitions, let replace):
                routedWrite.steps.append(.paths(try await routed(partitions), replace: replace))
            case .streamedPaths(let next, let replace):
                let settings = settings
                routedWrite.steps.append(.streamedPaths({
                    guard var part = try next() else { return nil }
                    part.path = ReviewPaths.target(of: part.path, settings: settings)
                    return part
                }, replace: replace))
            case .records(let stream, let collection, let replace, let progress):
                routedWrite.steps.append(.records(stream, into: try await prepare([collection])[0], replace: replace, progress: progress))
            case .push(var batch):
                batch.collection = try await prepare([batch.collection])[0]
                routedWrite.steps.append(.push(batch))
            case .publish:
                routedWrite.steps.append(step)
            case .expect(let path, let version):
                // As this writer reads it: a reviewed collection's path is its workspace.
                routedWrite.steps.append(.expect(target(path), atVersion: version))
            }
        }
        try await base.commit(routedWrite, each: each)
    }

    private func routed(_ partitions: [PartitionRecords]) async throws -> [PartitionRecords] {
        let targets = try await prepare(partitions.map(\.path))
        return zip(partitions, targets).map { PartitionRecords(path: $1, records: $0.records) }
    }

    // MARK: - As they are

    package func collections() async throws -> [CollectionHead] { try await base.collections() }
    package func partitions(of collection: String, keysStartingWith prefix: String, limit: Int) async throws -> [String] {
        try await base.partitions(of: collection, keysStartingWith: prefix, limit: limit)
    }
    package func publishedState(of names: [String]) async throws -> PublishedState { try await base.publishedState(of: names) }
    package func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64?) async throws -> PublishedState {
        try await base.publishedState(of: names, confirming: known, statedAt: statedAt)
    }
    package func sourcePosition(of follower: String) async throws -> String? { try await base.sourcePosition(of: follower) }
    package func forgetSourcePosition(of follower: String) async throws -> Bool { try await base.forgetSourcePosition(of: follower) }
    package func followers() async throws -> [SourceFollowerStatus] { try await base.followers() }
    package func recordSourceLag(of follower: String, bytes: Int64, at: Int64) async throws {
        try await base.recordSourceLag(of: follower, bytes: bytes, at: at)
    }
    package func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int { try await base.compact(collection, throughVersion: version) }
    package func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async {
        await base.watchForChanges(every: interval, onChange: onChange)
    }
    package func storeAttachment(_ reference: AttachmentReference, from next: () async throws -> [UInt8]?) async throws {
        try await base.storeAttachment(reference, from: next)
    }
    package func attachmentSize(_ sha256: String) async throws -> UInt64? { try await base.attachmentSize(sha256) }
    package func noteAttachmentUpload(_ sha256: String, into collection: String) async throws {
        try await base.noteAttachmentUpload(sha256, into: collection)
    }
    package func attachmentUploaded(_ sha256: String, into collection: String) async throws -> Bool {
        try await base.attachmentUploaded(sha256, into: collection)
    }
    package func collections(referringTo sha256: String, limit: Int) async throws -> [String] {
        try await base.collections(referringTo: sha256, limit: limit)
    }
    package func attachment(_ sha256: String, in collection: String) async throws -> AttachmentReference? { try await base.attachment(sha256, in: collection) }
    package func readAttachment(_ sha256: String, range: Range<UInt64>, _ body: ([UInt8]) async throws -> Void) async throws {
        try await base.readAttachment(sha256, range: range, body)
    }
    package func createUpload(_ upload: AttachmentUpload) async throws { try await base.createUpload(upload) }
    package func upload(_ token: String) async throws -> AttachmentUpload? { try await base.upload(token) }
    package func appendUpload(_ token: String, at offset: UInt64, from next: () async throws -> [UInt8]?) async throws -> UInt64 {
        try await base.appendUpload(token, at: offset, from: next)
    }
    package func completeUpload(_ token: String) async throws { try await base.completeUpload(token) }
    package func cancelUpload(_ token: String) async throws -> Bool { try await base.cancelUpload(token) }
    package func expireUploads(begunBefore seconds: Int64) async throws -> Int { try await base.expireUploads(begunBefore: seconds) }
    package func collectAttachmentGarbage(unreferencedFor grace: Int64, now: Int64) async throws -> AttachmentGarbage {
        try await base.collectAttachmentGarbage(unreferencedFor: grace, now: now)
    }
    package func exclusively<T: Sendable>(_ name: String, _ body: @Sendable () async throws -> T) async throws -> T {
        try await base.exclusively(name, body)
    }
    package func close() async { await base.close() }
}
