import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust

/// One consistent read of a collection (a read transaction): its head, and the records of a
/// full body or of a delta, in id order. Owned by one response at a time.
protocol RecordSource: AnyObject, Sendable {
    /// The head in this transaction: the records belong to exactly it.
    var head: CollectionHead { get }
    /// How many records ``next(_:)`` yields.
    var count: Int { get }
    /// Calls `body` with the next record's canonical bytes; false when there are no more.
    func next(_ body: (UnsafeRawBufferPointer) throws -> Void) async throws -> Bool
    /// Ends the transaction and returns the connection; safe to call twice.
    func close() async
}

/// What `serve` needs from a store, whichever database holds it: the reads behind every
/// answer, the writes of the write API, and a way to hear of other writers' commits.
///
/// Two implementations: ``SQLiteBackend`` (one file, the embedded default) and
/// ``PostgresBackend`` (a shared server that many stateless instances use at once). Both
/// produce the same records in the same order, so bodies are byte-identical.
protocol ServerBackend: Sendable {
    /// Every collection's head, as committed now.
    func collections() async throws -> [CollectionHead]
    /// A full body's records (`after` nil) or a delta's since `after`, in one transaction.
    func openRecords(in collection: String, after version: UInt64?) async throws -> any RecordSource
    /// The first version committed at or after `seconds` (for `If-Modified-Since`).
    func firstVersion(in collection: String, committedAtOrAfter seconds: Int64) async throws -> UInt64?
    /// What the signed index states, read in one transaction.
    func publishedState(including included: @escaping @Sendable (String) -> Bool) async throws -> (sequence: UInt64, entries: [SignedIndex.Entry])
    /// Upserts or hides `records` as one version.
    func write(_ records: [Record], to collection: String) async throws -> WriteResult
    /// Imports an NDJSON or JSON-array body as one version (`replace`: hide what it omits).
    func importBatch(_ body: [UInt8], into collection: String, replace: Bool) async throws -> WriteResult
    /// One client's batch of offline writes (two-way sync).
    func push(_ mutations: [ParsedMutation], from client: String, user: String?, to collection: String, retention: PushRetention) async throws -> PushOutcome
    /// The values writes replaced, newest first.
    func history(of id: String, in collection: String, limit: Int) async throws -> [HistoryEntry]
    /// Compacts as far as `policy` allows; nil when the floor would not rise.
    func compact(_ collection: String, policy: CompactionPolicy) async throws -> CompactionResult?
    /// Calls `onChange` with every head whenever another writer may have committed, until
    /// the task is cancelled.
    func watchForChanges(every interval: Duration, onChange: @escaping @Sendable ([CollectionHead]) -> Void) async
    /// Closes connections (at shutdown).
    func shutdown() async
}
