import DeltaSnapCore
import DeltaSnapTrust

/// The one interface to a DeltaSnap store, whichever database holds it: what the server,
/// the CLI, bake and the tests use — cut by capability (``StoreReader``, ``StoreWriter``,
/// ``AttachmentStore``, ``FollowerPositions``, ``StoreLocks``), as GRDB cuts its database
/// access into a reader and a writer: a store conforms to every part, and code asks for the
/// least it needs.
///
/// Two conformances: ``SQLiteCollectionStore`` (one file, the embedded default) and
/// `PostgresCollectionStore` in DeltaSnapPostgresStore (a shared server many stateless instances
/// use at once). Both produce the same records in the same order, so every body, snapshot
/// and export is byte-identical between them. What can be written once on top of the
/// requirements is (see `CollectionStore+Operations.swift`): writes of parsed records,
/// compaction by policy, export, bake and the bundled signed index.
///
/// Every requirement throws ``StoreError`` for what a caller can act on (an unknown
/// collection, a store out of reach) and ``ImportError`` for bad input.
///
/// ```swift
/// let store = try SQLiteCollectionStore(path: "deltasnap.sqlite")
/// let result = try await store.write([try Record(json: Array(#"{"id":"AD","name":"Andorra"}"#.utf8))], to: "countries")
/// try await store.export("countries") { chunk in FileHandle.standardOutput.write(Data(chunk)) }
/// await store.close()
/// ```
package protocol CollectionStore: ServableStore, StoreWriter, AttachmentStore, FollowerPositions, StoreLocks {}

/// A store as an app that embeds the server holds one — ``SQLiteCollectionStore`` or
/// `PostgresCollectionStore`: opened, handed to `DeltaSnapAPI`, closed. What a store does is
/// DeltaSnap's own (``CollectionStore`` and its parts are `package`): a store is chosen, not
/// written, and `DeltaSnapAPI` refuses a type of another's that conforms to this.
///
/// ```swift
/// let store = try SQLiteCollectionStore(path: "deltasnap.sqlite")
/// let api = try await DeltaSnapAPI(store: store)
/// // … serve …
/// await store.close()
/// ```
public protocol ServableStore: Sendable {
    /// Closes the store's connections. Call once, when done.
    func close() async
}

/// What reads a store: heads, records, bodies, pages, versions, history, and the changes
/// other writers make. Code that only reads asks for this (``ViewIndex``, the console, a
/// poll), as GRDB's code asks for a `DatabaseReader`.
///
/// ```swift
/// func count(in store: some StoreReader) async throws -> Int { try await store.head(of: "countries")?.count ?? 0 }
/// ```
package protocol StoreReader: Sendable {
    /// Every collection's head as committed now (partitions left out), sorted by name.
    func collections() async throws -> [CollectionHead]
    /// One collection's head, or nil when it does not exist.
    func head(of collection: String) async throws -> CollectionHead?
    /// The heads of those of `names` that exist, in one read: a view of a thousand partitions
    /// not in memory is one query on PostgreSQL, not a thousand round trips.
    func heads(of names: [String]) async throws -> [CollectionHead]
    /// The visible record `id` of `collection` as committed now (nil: none, or hidden).
    func record(_ id: String, in collection: String) async throws -> Record?
    /// The paths (`NAME/KEY`) of the partitions of `collection` the store holds, sorted —
    /// there may be millions: a caller that needs them all (a `TRUNCATE` followed) asks here,
    /// never through ``collections()``, which leaves partitions out.
    func partitions(of collection: String) async throws -> [String]
    /// At most `limit` paths of `collection`'s partitions whose key starts with `prefix`, in
    /// order from the first such key: a search among millions (the operator's console), found
    /// by the name index.
    func partitions(of collection: String, keysStartingWith prefix: String, limit: Int) async throws -> [String]
    /// A full body's records (`after` nil: the visible ones) or a delta's since `after`
    /// (tombstones included), in id order, from one read transaction.
    /// Throws ``StoreError/unknownCollection(_:)``.
    func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource
    /// A page of the head: up to `limit` visible records whose ids sort after `id` (nil: from
    /// the first) in id order, from one read transaction, found by the primary key (its cost
    /// is the page's, not the collection's). Throws ``StoreError/unknownCollection(_:)``.
    func openPage(of collection: String, after id: String?, limit: Int) async throws -> any RecordSource
    /// The first version committed at or after `seconds` (for `If-Modified-Since`).
    func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64?
    /// The newest `limit` versions of `collection` with their commit times (seconds since
    /// 1970), newest first: what the operator's console lists.
    func versions(of collection: String, limit: Int) async throws -> [(version: UInt64, committedAt: Int64)]
    /// What a signed index states (the publication sequence and one entry, with its digest,
    /// per collection or partition of `names` that exists), read in one transaction.
    func publishedState(of names: [String]) async throws -> PublishedState
    /// ``publishedState(of:)`` for a document that already states most of `names`: every head
    /// read in the same one transaction, but an entry made (digest, fingerprint, date) only for
    /// a name whose head is not the one `known` gives; the others are listed as confirmed.
    /// A changed view of a thousand partitions of which one moved makes one entry, and every
    /// entry of the document still belongs to one state of the store.
    ///
    /// `statedAt`: the publication sequence at which every head of `known` was the store's
    /// (the sequence of the document they come from). A store that keeps when each head last
    /// moved may then confirm a known name by its not having moved since — reading the heads
    /// that moved, not every head named (O(changes), not O(names)); nil: each head is read.
    func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64?) async throws -> PublishedState
    /// The values writes replaced, newest first.
    func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry]
    /// Calls `onChange` with the heads that changed (a commit, a raised floor) since its
    /// previous call, whoever wrote them (another process or instance), until the task is
    /// cancelled; its first call has every collection that is not a partition. Partitions are
    /// never all read: a store may hold millions.
    func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async
}

/// What writes a store: one transaction primitive, ``commit(_:each:)``, of which an import (of
/// one collection, of several paths, of a source's transactions, of streamed paths), a
/// client's push and a review's publication are conveniences (`StoreWrite.swift`); and a
/// compaction. A writer reads too, as GRDB's `DatabaseWriter` is a reader.
package protocol StoreWriter: StoreReader {
    /// Runs every step of `write` in order in one transaction and commits them with its
    /// position, or — when a step throws (a bad record names its line, ``ImportError``) —
    /// commits nothing. `each` is told what every step wrote as it is written, on the store's
    /// writer and before the commit.
    ///
    /// ```swift
    /// try await store.commit(StoreWrite([.paths(partitions, replace: false)], recording: position)) { outcome in
    ///     if case .written(_, let result) = outcome, result.committed { print(result.collection) }
    /// }
    /// ```
    func commit(_ write: StoreWrite, each: @escaping @Sendable (StoreWrite.Outcome) -> Void) async throws
    /// Deletes tombstones of versions up to `version` (at most the head) and raises the
    /// floor to it; a raised floor is published under a new sequence. Returns how many went.
    func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int
}

/// Attachments and resumable uploads (docs/PROTOCOL.md §12): blobs kept once per store,
/// who may read them, uploads in progress, garbage collection.
package protocol AttachmentStore: Sendable {
    /// Keeps the attachment `reference` names, its bytes read from `next` (nil: the end), once
    /// their size and SHA-256 are proven (``BlobVerifier``); nothing is kept otherwise
    /// (``StoreError/attachmentMismatch(_:)``). The same bytes are kept once per store, and
    /// every byte is read and checked even when they are held already: no caller learns from a
    /// shortcut that someone else stored them.
    func storeAttachment(_ reference: AttachmentReference, from next: () async throws -> [UInt8]?) async throws
    /// The size of the attachment `sha256` when the store holds it, else nil.
    func attachmentSize(_ sha256: String) async throws -> UInt64?
    /// Notes that the bytes of `sha256`, proven, were uploaded into `collection` (or a
    /// partition): a writer of it may then name them in a push (``AttachmentProof``). Kept
    /// until the blob is collected; noting it again is harmless.
    func noteAttachmentUpload(_ sha256: String, into collection: String) async throws
    /// Whether the bytes of `sha256` were uploaded into `collection` (``noteAttachmentUpload(_:into:)``)
    /// and are still held.
    func attachmentUploaded(_ sha256: String, into collection: String) async throws -> Bool
    /// At most `limit` collections and partitions whose records refer to `sha256` (or did,
    /// until the next garbage collection), in no particular order: where a writer who may read one of them
    /// proves it holds those bytes.
    func collections(referringTo sha256: String, limit: Int) async throws -> [String]
    /// The attachment `sha256` as `collection` (or partition) refers to it — its size, and
    /// the media type its first reference there stated — when the store holds it and a
    /// record of `collection` refers to it (or did, until the next garbage collection);
    /// nil otherwise, one answer for both, so no caller learns that another's blob exists.
    func attachment(_ sha256: String, in collection: String) async throws -> AttachmentReference?
    /// Calls `body` with the bytes of `range` of the held attachment `sha256`, in order, at
    /// most 1 MiB at a time. Throws ``StoreError/missingAttachment(_:)`` when it is not held.
    func readAttachment(_ sha256: String, range: Range<UInt64>, _ body: ([UInt8]) async throws -> Void) async throws
    /// Starts the resumable upload `upload` (nothing received yet).
    func createUpload(_ upload: AttachmentUpload) async throws
    /// The upload `token`, or nil when it does not exist.
    func upload(_ token: String) async throws -> AttachmentUpload?
    /// Appends the bytes `next` yields (nil: the end) to upload `token`, which must hold
    /// exactly `offset` bytes (else ``StoreError/uploadOffsetMismatch(_:expected:)``), and
    /// returns how many it holds then. What arrived is kept durably every
    /// ``AttachmentUpload/checkpointBytes`` and when `next` ends or throws, so a cut
    /// connection loses at most what was not checkpointed. More bytes than the upload's
    /// size are refused (``StoreError/attachmentMismatch(_:)``).
    func appendUpload(_ token: String, at offset: UInt64, from next: () async throws -> [UInt8]?) async throws -> UInt64
    /// Proves the upload's bytes (its whole size, its SHA-256) and keeps them as the blob, or
    /// throws ``StoreError/attachmentMismatch(_:)``; the upload is gone either way.
    func completeUpload(_ token: String) async throws
    /// Drops upload `token` and its bytes; false when it did not exist.
    func cancelUpload(_ token: String) async throws -> Bool
    /// Drops every upload begun before `seconds` (since 1970); returns how many.
    func expireUploads(begunBefore seconds: Int64) async throws -> Int
    /// Removes every blob no visible record and no value kept in history refers to, once it
    /// has been unreferenced for `grace` seconds (and not stored again meanwhile); writes
    /// wait meanwhile, so none refers to a blob being removed. Also brings the per-collection
    /// reference table (who may read a blob) to what the records say.
    func collectAttachmentGarbage(unreferencedFor grace: Int64, now: Int64) async throws -> AttachmentGarbage
}

/// Where each source follower (`deltasnap follow`) stands: the position it recorded with
/// its last publication, and how far its source ran ahead.
package protocol FollowerPositions: Sendable {
    /// The position a source follower last recorded with its writes (nil: none yet).
    func sourcePosition(of follower: String) async throws -> String?
    /// Every follower that recorded a position, with when it last did (seconds since 1970): a
    /// follower records one with each publication, so this is how recent its last one is.
    func followers() async throws -> [SourceFollowerStatus]
    /// Notes how far `follower`'s source ran ahead of it, measured at `at` (seconds since
    /// 1970): what the operator's console shows. Nothing for a follower with no position yet.
    func recordSourceLag(of follower: String, bytes: Int64, at: Int64) async throws
    /// Forgets a follower's position (`follow --drop-slot`); whether there was one.
    func forgetSourcePosition(of follower: String) async throws -> Bool
}

/// Sections no two callers of a store run at once under one name, across the processes and
/// instances that share it.
package protocol StoreLocks: Sendable {
    /// Runs `body` while no other caller of this store runs one under `name` — in any process
    /// or instance that shares the store (PostgreSQL: a session advisory lock; by default, in
    /// this process only). Review steps of one path hold it.
    func exclusively<T: Sendable>(_ name: String, _ body: @Sendable () async throws -> T) async throws -> T
}

/// What a signed index states: the publication sequence and the entries, from one read.
package struct PublishedState: Sendable, Equatable {
    /// Raised by every commit that changes what is published; never lowered.
    package var sequence: UInt64
    package var entries: [SignedIndex.Entry]
    /// Names whose head was the one the caller knew (``CollectionStore/publishedState(of:confirming:)``):
    /// no entry was made for them.
    package var confirmed: Set<String>

    package init(sequence: UInt64, entries: [SignedIndex.Entry], confirmed: Set<String> = []) {
        self.sequence = sequence
        self.entries = entries
        self.confirmed = confirmed
    }
}

/// What identifies a published entry's state: its token and its floor.
package struct PublishedHead: Hashable, Sendable {
    package var epoch: String
    package var version: UInt64
    package var floor: UInt64

    package init(epoch: String, version: UInt64, floor: UInt64) {
        (self.epoch, self.version, self.floor) = (epoch, version, floor)
    }

    package init(_ head: CollectionHead) {
        self.init(epoch: head.epoch, version: head.version, floor: head.floor)
    }
}

/// One consistent read of a collection (a read transaction): its head, and the records of a
/// full body or of a delta, in id order. Owned by one response at a time; close it.
package protocol RecordSource: AnyObject, Sendable {
    /// The head in this transaction: the records belong to exactly it.
    var head: CollectionHead { get }
    /// How many records ``next(_:)`` yields.
    var count: Int { get }
    /// Calls `body` with the next record's canonical bytes (valid only inside `body`);
    /// false when there are no more.
    func next(_ body: (UnsafeRawBufferPointer) throws -> Void) async throws -> Bool
    /// Ends the transaction and returns the connection; safe to call twice.
    func close() async
}

/// A store that keeps each attachment as a file of its own (the embedded default): the
/// server then reads a download straight into its network buffers from the file, as nginx
/// serves a static file, instead of through ``AttachmentStore/readAttachment(_:range:_:)``.
package protocol AttachmentFiles: Sendable {
    /// Where the file of the attachment `sha256` is when the store holds it (nil for a name
    /// that is no SHA-256). Not checked: opening it tells, in the same system call.
    func attachmentFile(_ sha256: String) -> String?
}
