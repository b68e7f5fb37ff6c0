import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation

/// The embedded default store: one SQLite file, read by pooled read-only connections (WAL
/// lets them run beside the writer) and written by one connection at a time.
///
/// Every blocking call runs on the store's own dispatch queues (``BlockingQueue``): writes
/// on a serial one — which is also what keeps them one at a time — and reads on a
/// concurrent one. Stepping an open cursor is the exception: one step is a few
/// microseconds of in-memory work, and a hop per record would cost more than it saves.
///
/// An app that embeds the server opens one and hands it over; what it does beyond that is
/// DeltaSnap's own (`package`: the CLI's and the server's).
///
/// ```swift
/// let store = try SQLiteCollectionStore(path: "deltasnap.sqlite")
/// let api = try await DeltaSnapAPI(store: store)   // owns it: `api.shutdown()` closes it
/// ```
public final class SQLiteCollectionStore: CollectionStore, AttachmentFiles {
    package let path: String
    let pool: SQLiteReadPool
    /// The attachments, in a directory beside the file.
    let blobs: BlobDirectory
    /// Nil when opened read-only.
    /// The one writing connection: only the writer queue touches it, one job at a time.
    private let writer: HandedOver<SQLiteDatabase>?
    private let writes = BlockingQueue(label: "deltasnap.sqlite.writer")
    private let reads = BlockingQueue(label: "deltasnap.sqlite.readers", concurrent: true)
    /// The publication sequence when the store was opened: a watcher reports every change
    /// after it, so no head read on demand since the opening can go stale unnoticed.
    private let openedAt: UInt64

    /// Opens (and creates, or upgrades) the store at `path`. `readOnly` opens no writer and
    /// creates nothing: a missing file is an error, and writes throw.
    ///
    /// At most `maximumReaders` read transactions run at once (a full body streams from
    /// one); more reads wait for a connection to come back.
    public init(path: String, configuration: StoreConfiguration = StoreConfiguration(), readOnly: Bool = false, maximumReaders: Int = 64) throws {
        pool = SQLiteReadPool(path: path, maximumReaders: maximumReaders)
        self.path = path
        blobs = BlobDirectory(databasePath: path)
        if readOnly {
            // Fails now, on a missing or foreign file, rather than at the first read.
            try pool.checkin(pool.checkoutOpening())
            writer = nil
        } else {
            // The writer creates the schema, so read-only connections can open the file.
            writer = HandedOver(try SQLiteDatabase(path: path, configuration: configuration))
            blobs.removeLeftovers()
        }
        let pool = self.pool
        let store = try pool.checkoutOpening()
        defer { pool.checkin(store) }
        openedAt = (try? store.read { try $0.latestPublished() }) ?? 0
    }

    package func collections() async throws -> [CollectionHead] {
        try await reading { store in try store.read { try $0.unpartitionedCollections() } }
    }

    package func partitions(of collection: String) async throws -> [String] {
        try await reading { store in try store.read { try $0.partitionPaths(of: collection) } }
    }

    package func partitions(of collection: String, keysStartingWith prefix: String, limit: Int) async throws -> [String] {
        try await reading { store in try store.read { try $0.partitionPaths(of: collection, keysStartingWith: prefix, limit: limit) } }
    }

    package func head(of collection: String) async throws -> CollectionHead? {
        try await reading { try $0.head(of: collection) }
    }

    /// One connection from the pool for all of them.
    package func heads(of names: [String]) async throws -> [CollectionHead] {
        try await reading { store in try names.compactMap { try store.head(of: $0) } }
    }

    package func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource {
        try await SQLiteRecordSource.open(pool: pool, on: reads, collection: collection, selecting: version.map { .changes(after: $0) } ?? .visible)
    }

    package func openPage(of collection: String, after id: String?, limit: Int) async throws -> any RecordSource {
        try await SQLiteRecordSource.open(pool: pool, on: reads, collection: collection, selecting: .page(after: id ?? "", limit: limit))
    }

    package func record(_ id: String, in collection: String) async throws -> Record? {
        let bytes = try await reading { store in try store.read { try $0.visibleRecord(id, in: collection) } }
        return try bytes.map { try Record.parse($0) }
    }

    package func versions(of collection: String, limit: Int) async throws -> [(version: UInt64, committedAt: Int64)] {
        try await reading { store in try store.read { try $0.versions(of: collection, limit: limit) } }
    }

    package func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64? {
        try await reading { store in try store.read { try $0.firstVersion(in: collection, committedAtOrAfter: seconds) } }
    }

    package func publishedState(of names: [String]) async throws -> PublishedState {
        try await reading { store in try store.read { try $0.publishedState(of: names) } }
    }

    package func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64?) async throws -> PublishedState {
        try await reading { store in try store.read { try $0.publishedState(of: names, confirming: known, statedAt: statedAt) } }
    }

    package func sourcePosition(of follower: String) async throws -> String? {
        // From the writer: a follower reads its own last commit, never a stale snapshot.
        try await writing { try $0.sourcePosition(of: follower) }
    }

    package func forgetSourcePosition(of follower: String) async throws -> Bool {
        try await writing { try $0.forgetSourcePosition(of: follower) }
    }

    package func followers() async throws -> [SourceFollowerStatus] {
        try await writing { try $0.followers() }
    }

    package func recordSourceLag(of follower: String, bytes: Int64, at: Int64) async throws {
        try await writing { try $0.recordSourceLag(of: follower, bytes: bytes, at: at) }
    }

    package func commit(_ write: StoreWrite, each: @escaping @Sendable (StoreWrite.Outcome) -> Void) async throws {
        try await writing { try $0.commit(write, each: each) }
    }

    package func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry] {
        try await reading { try $0.history(of: id, in: collection, limit: limit) }
    }

    package func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int {
        try await writing { try $0.compact(collection, throughVersion: version) }
    }

    /// Polls SQLite's `data_version`, which changes whenever another connection commits.
    package func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async {
        // Runs until cancelled, whatever happens: the server stops when its watcher returns.
        let watcher = HandedOver(DataVersionWatcher(path: path, since: openedAt))
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            if let heads = try? await reads.run({ watcher.value.headsIfChanged() }) { onChange(heads) }
        }
    }

    package func storeAttachment(_ reference: AttachmentReference, from next: () async throws -> [UInt8]?) async throws {
        guard writer != nil else { throw StoreError.readOnly(path) }
        try await blobs.store(sha256: reference.sha256, size: reference.size, finishingOn: writes, from: next)
    }

    package func attachmentSize(_ sha256: String) async throws -> UInt64? {
        blobs.size(of: sha256)
    }

    package func noteAttachmentUpload(_ sha256: String, into collection: String) async throws {
        try await writing { try $0.noteAttachmentUpload(sha256, into: collection) }
    }

    package func attachmentUploaded(_ sha256: String, into collection: String) async throws -> Bool {
        guard blobs.size(of: sha256) != nil else { return false }
        return try await reading { try $0.attachmentUploaded(sha256, into: collection) }
    }

    package func collections(referringTo sha256: String, limit: Int) async throws -> [String] {
        try await reading { try $0.collections(referringTo: sha256, limit: limit) }
    }

    package func attachment(_ sha256: String, in collection: String) async throws -> AttachmentReference? {
        guard AttachmentReference.isSHA256(sha256) else { return nil }
        guard let type = try await reading({ store in try store.read { try $0.attachmentType(sha256, in: collection) } }),
              let size = blobs.size(of: sha256)
        else { return nil }
        return try AttachmentReference(sha256: sha256, size: size, type: type)
    }

    package func attachmentFile(_ sha256: String) -> String? {
        AttachmentReference.isSHA256(sha256) ? blobs.path(of: sha256) : nil
    }

    package func readAttachment(_ sha256: String, range: Range<UInt64>, _ body: ([UInt8]) async throws -> Void) async throws {
        let file = try blobs.open(sha256)
        defer { file.close() }
        var offset = range.lowerBound
        while offset < range.upperBound {
            let count = Int(min(range.upperBound - offset, BlobDirectory.readChunkBytes))
            let at = offset
            let chunk = try await reads.run { try file.read(count, at: at) }
            try await body(chunk)
            offset += UInt64(chunk.count)
        }
    }

    package func createUpload(_ upload: AttachmentUpload) async throws {
        try await writing { try $0.createUpload(upload) }
    }

    package func upload(_ token: String) async throws -> AttachmentUpload? {
        guard AttachmentUpload.isToken(token) else { return nil }
        return try await reading { try $0.upload(token) }
    }

    package func appendUpload(_ token: String, at offset: UInt64, from next: () async throws -> [UInt8]?) async throws -> UInt64 {
        guard writer != nil else { throw StoreError.readOnly(path) }
        guard let upload = try await upload(token) else { throw StoreError.unknownUpload(token) }
        guard upload.received == offset else { throw StoreError.uploadOffsetMismatch(token, expected: upload.received) }
        return try await blobs.append(to: upload, from: next, syncingOn: reads) { from, to in
            try await writing { try $0.advanceUpload(token, from: from, to: to) }
        }
    }

    package func completeUpload(_ token: String) async throws {
        guard let upload = try await upload(token) else { throw StoreError.unknownUpload(token) }
        defer { blobs.removeUpload(token) }
        do {
            try await blobs.complete(upload, readingOn: reads)
        } catch {
            _ = try? await writing { try $0.deleteUpload(token) }
            throw error
        }
        _ = try await writing { try $0.deleteUpload(token) }
    }

    package func cancelUpload(_ token: String) async throws -> Bool {
        guard AttachmentUpload.isToken(token) else { return false }
        let existed = try await writing { try $0.deleteUpload(token) }
        blobs.removeUpload(token)
        return existed
    }

    package func expireUploads(begunBefore seconds: Int64) async throws -> Int {
        let tokens = try await writing { try $0.deleteUploads(begunBefore: seconds) }
        for token in tokens { blobs.removeUpload(token) }
        return tokens.count
    }

    package func collectAttachmentGarbage(unreferencedFor grace: Int64, now: Int64) async throws -> AttachmentGarbage {
        try await writing { try $0.collectAttachmentGarbage(unreferencedFor: grace, now: now) }
    }

    public func close() async {}

    private func reading<T: Sendable>(_ body: @escaping @Sendable (SQLiteDatabase) throws -> T) async throws -> T {
        try await pool.withStore(on: reads, body)
    }

    private func writing<T: Sendable>(_ body: @escaping @Sendable (SQLiteDatabase) throws -> T) async throws -> T {
        guard let writer else { throw StoreError.readOnly(path) }
        return try await writes.run { try body(writer.value) }
    }
}

/// Notices other connections' commits by SQLite's `data_version`; used by one poll at a time
/// (handed over to the read queue for each).
private final class DataVersionWatcher {
    private let path: String
    private var connection: SQLiteDatabase?
    private var lastDataVersion: Int64?
    /// The highest publication sequence read so far.
    private var lastSeen: UInt64
    private var first = true

    init(path: String, since sequence: UInt64) {
        self.path = path
        lastSeen = sequence
    }

    /// The heads changed since the last call when the file changed (the first call adds
    /// every collection that is not a partition); nil otherwise.
    func headsIfChanged() -> [CollectionHead]? {
        if connection == nil { connection = try? SQLiteDatabase(path: path, readOnly: true) }
        guard let connection, let version = try? connection.dataVersion(), version != lastDataVersion else { return nil }
        let read: (heads: [CollectionHead], through: UInt64)? = try? connection.read { [lastSeen, first] reader in
            let changed = try reader.heads(publishedAfter: lastSeen)
            return first ? (try reader.unpartitionedCollections() + changed.heads, changed.through) : changed
        }
        guard let read else { return nil }
        lastDataVersion = version
        lastSeen = read.through
        first = false
        return read.heads
    }
}

/// A read transaction on a pooled SQLite connection and a cursor over its records.
final class SQLiteRecordSource: RecordSource, @unchecked Sendable {
    let head: CollectionHead
    let count: Int
    private let pool: SQLiteReadPool
    private var store: SQLiteDatabase?
    /// Holds a prepared statement of `store`'s connection: released before the connection
    /// goes back to the pool, or finalising it later would race another request using it.
    private var cursor: RecordCursor?

    /// Which records a source yields.
    enum Selection {
        /// A full body's: every visible record.
        case visible
        /// A delta's: every record changed or hidden after a version.
        case changes(after: UInt64)
        /// A page's: up to `limit` visible records whose ids sort after `after`.
        case page(after: String, limit: Int)
    }

    /// Waits for a connection (suspended, when the pool is at its cap), then begins the
    /// read on `queue`.
    static func open(pool: SQLiteReadPool, on queue: BlockingQueue, collection: String, selecting selection: Selection) async throws -> SQLiteRecordSource {
        let lease = Lease(store: try await pool.checkout(openingOn: queue))
        return try await queue.run { try SQLiteRecordSource(pool: pool, store: lease.store, collection: collection, selecting: selection) }
    }

    /// Takes `store`, checked out of `pool`, and gives it back on failure or close.
    private init(pool: SQLiteReadPool, store: SQLiteDatabase, collection: String, selecting selection: Selection) throws {
        self.pool = pool
        do {
            let reader = try store.beginRead()
            guard let head = try reader.head(of: collection) else { throw StoreError.unknownCollection(collection) }
            self.head = head
            switch selection {
            case .visible:
                count = head.count
                cursor = try reader.visibleRecords(in: collection)
            case .changes(let version):
                count = try reader.changeCount(in: collection, after: version)
                cursor = try reader.changes(in: collection, after: version)
            case .page(let id, let limit):
                count = try reader.visibleCount(in: collection, after: id, limit: limit)
                cursor = try reader.visibleRecords(in: collection, after: id, limit: limit)
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
