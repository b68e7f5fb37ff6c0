import DeltaSnapCore

/// One transaction of a store's writer, as a value: its steps run in order and commit
/// together with ``position``, or nothing does. The one thing a store implements to write
/// (``StoreWriter/commit(_:each:)``); an import, a source's transactions, a client's push and
/// a review's publication are each a ``StoreWrite`` built by a convenience in an extension.
///
/// A value rather than a closure over an open transaction (GRDB's `write { db in }`) because
/// the two stores run a transaction in different worlds: SQLite's synchronously on its own
/// writer thread, where nothing may be awaited, PostgreSQL's on an async connection. Each runs
/// the same steps its own way, and a wrapper (``ReviewRoutedStore``) rewrites the paths of
/// one value instead of overriding six entry points.
///
/// ```swift
/// try await store.commit(StoreWrite(
///     [.paths([PartitionRecords(path: "prices/eu", records: records)], replace: false)],
///     recording: SourcePosition(follower: "shop", position: "0/16B3748"))
/// ) { outcome in print(outcome) }
/// ```
package struct StoreWrite: Sendable {
    /// One step of a write, run inside the transaction.
    package enum Step: Sendable {
        /// Paths held in memory (partitions or collections), one version per path that
        /// changed; with `replace`, each path's records not listed are hidden. A bad record
        /// refuses the write naming its line (``PartitionRecords/refusal(_:of:)``).
        case paths([PartitionRecords], replace: Bool)
        /// Paths streamed one after the other from `next` (nil: no more), each read once,
        /// in bounded memory (``PathBatches``). `next` is called on the store's writer (for
        /// SQLite, its own thread, where nothing can be awaited).
        case streamedPaths(@Sendable () throws -> PathRecords?, replace: Bool)
        /// One collection's records from `stream` as one version (`deltasnap import`), with
        /// `progress` told the count read every 100,000 records.
        case records(RecordStream, into: String, replace: Bool, progress: (@Sendable (Int) -> Void)?)
        /// One client's batch of offline writes (two-way sync).
        case push(PushBatch)
        /// One publication of review before publish: refused ``StoreError/busy(_:)`` unless its
        /// path is still at the version its changes were read against, checked in this transaction.
        case publish(ReviewPublication)
        /// Writes nothing; refuses the whole write (``StoreError/busy(_:)``, ``moved(_:to:expected:)``)
        /// unless `path` is at `version` (nil: it has none) — what was read from it before the
        /// write is still what it holds. Until the commit nothing moves it: SQLite's write lock
        /// holds every path, PostgreSQL locks the path's row.
        case expect(String, atVersion: UInt64?)
    }

    /// The refusal of an ``Step/expect(_:atVersion:)`` step: `path` is at `version`, not `expected`.
    package static func moved(_ path: String, to version: UInt64?, expected: UInt64?) -> StoreError {
        .busy("\"\(path)\" was written while this write was prepared (version \(version ?? 0), not \(expected ?? 0))")
    }

    /// What one step wrote, told as it is written and before the commit: when the commit
    /// throws, none of it was committed.
    package enum Outcome: Sendable {
        /// One path's result: `step` is the index of the step that wrote it.
        case written(step: Int, WriteResult)
        /// A push's outcome.
        case pushed(step: Int, PushOutcome)
    }

    package var steps: [Step]
    /// Where a source follower stands once this commits, recorded in the same transaction.
    package var position: SourcePosition?
    /// Whether every step is one of a follower's source transactions (held paths that
    /// replace nothing, ``init(sourceTransactions:)``): small, their paths mostly existing,
    /// which a store may merge set-based whatever their number — PostgreSQL does.
    package private(set) var isSourceTransactions = false

    package init(_ steps: [Step], recording position: SourcePosition? = nil) {
        self.steps = steps
        self.position = position
    }

    /// A follower's source transactions, in order, each one held step, with the last
    /// position among them.
    package init(sourceTransactions transactions: [StoreTransaction]) {
        self.init(transactions.map { .paths($0.partitions, replace: false) }, recording: transactions.last(where: { $0.position != nil })?.position)
        isSourceTransactions = true
    }

    /// Whether there is nothing to commit: no position, and no step but empty held paths.
    package var isEmpty: Bool {
        position == nil && steps.allSatisfy { if case .paths(let partitions, _) = $0 { partitions.isEmpty } else { false } }
    }
}

/// One client's batch of offline writes, as ``StoreWrite/Step/push(_:)`` carries it:
/// idempotent by sequence number, merged by `merge` (``MergePolicy/fork``: conflict copies).
/// A write whose value names a blob that `attachments` does not prove and that `collection`'s
/// records do not already refer to is refused `missing_attachment`, as one the store does not hold.
package struct PushBatch: Sendable {
    package var mutations: [ParsedMutation]
    package var client: String
    /// The authenticated user (write numbers are kept per user and client), when there is one.
    package var user: String?
    package var collection: String
    package var retention: PushRetention
    package var merge: MergePolicy
    package var attachments: AttachmentProof

    package init(
        _ mutations: [ParsedMutation], from client: String, user: String? = nil, to collection: String, retention: PushRetention = PushRetention(),
        merge: MergePolicy = .fields, attachments: AttachmentProof = .unchecked
    ) {
        self.mutations = mutations
        self.client = client
        self.user = user
        self.collection = collection
        self.retention = retention
        self.merge = merge
        self.attachments = attachments
    }
}

/// The write entry points, each one ``StoreWrite`` committed by ``StoreWriter/commit(_:each:)``.
extension StoreWriter {
    /// Commits `write` and returns what its steps wrote, in order.
    ///
    /// ```swift
    /// let outcomes = try await store.commit(StoreWrite([.paths(partitions, replace: false)]))
    /// ```
    package func commit(_ write: StoreWrite) async throws -> [StoreWrite.Outcome] {
        let outcomes = LockedValue<[StoreWrite.Outcome]>([])
        try await commit(write) { outcome in outcomes.withLock { $0.append(outcome) } }
        return outcomes.withLock { $0 }
    }

    /// Every path's result of `write`, in the order written.
    private func written(_ write: StoreWrite) async throws -> [WriteResult] {
        try await commit(write).compactMap { if case .written(_, let result) = $0 { result } else { nil } }
    }

    /// Imports every record `stream` yields into `collection` as one new version (none when
    /// nothing changed): only records whose canonical bytes change are written; a hidden
    /// record hides; with `replace`, records the input does not mention are hidden. Any bad
    /// record aborts the whole import (``ImportError`` naming its line): nothing is committed.
    ///
    /// ```swift
    /// let result = try await store.importRecords(from: stream, into: "countries", replace: true, progress: nil)
    /// ```
    package func importRecords(
        from stream: RecordStream, into collection: String, replace: Bool, progress: (@Sendable (Int) -> Void)?
    ) async throws -> WriteResult {
        let results = try await written(StoreWrite([.records(stream, into: collection, replace: replace, progress: progress)]))
        guard let result = results.first else { preconditionFailure("a store committed a records step without its result") }
        return result
    }

    /// Imports several partitions (held whole; ``importStreams(_:replace:recording:each:)``
    /// streams them) or collections, one version per path that changed, all in one
    /// transaction: a bad record commits nothing. `position`, when given, is recorded in that
    /// same transaction (a source follower resumes exactly after what it committed).
    package func importPartitions(_ partitions: [PartitionRecords], replace: Bool, recording position: SourcePosition?) async throws -> [WriteResult] {
        try await written(StoreWrite([.paths(partitions, replace: replace)], recording: position))
    }

    /// Several transactions of a source, in order, committed together: each is one version
    /// of every path it names (a path named again gets the next version), with the last
    /// position — a follower that stops at any moment finds the position of exactly what
    /// was committed.
    package func importTransactions(_ transactions: [StoreTransaction]) async throws -> [[WriteResult]] {
        let write = StoreWrite(sourceTransactions: transactions)
        var results = transactions.map { _ in [WriteResult]() }
        for case .written(let step, let result) in try await commit(write) { results[step].append(result) }
        return results
    }

    /// Collections or partitions too large to hold in memory — a source transaction of a
    /// million rows — each read once from the stream `next` hands over (nil: no more), in
    /// one transaction: one version per path that changed, `position` recorded with them,
    /// and a bad record commits nothing. With `replace`, each path's records its stream does
    /// not list are hidden. `each` is told every path's result as it is written, before the
    /// commit: a million partitions need not be held as a million results.
    ///
    /// ```swift
    /// try await store.importStreams(spill.streams(), replace: false, recording: position) { result in
    ///     if result.committed { print("\(result.collection): version \(result.head!.version)") }
    /// }
    /// ```
    package func importStreams(
        _ next: @escaping @Sendable () throws -> PathRecords?, replace: Bool, recording position: SourcePosition?,
        each: @escaping @Sendable (WriteResult) -> Void
    ) async throws {
        try await commit(StoreWrite([.streamedPaths(next, replace: replace)], recording: position)) { outcome in
            if case .written(_, let result) = outcome { each(result) }
        }
    }

    /// ``importStreams(_:replace:recording:each:)`` returning every path's result, in the
    /// order the paths came.
    ///
    /// ```swift
    /// let results = try await store.importStreams(spill.streams(), replace: false, recording: position)
    /// ```
    package func importStreams(_ next: @escaping @Sendable () throws -> PathRecords?, replace: Bool, recording position: SourcePosition?) async throws -> [WriteResult] {
        try await written(StoreWrite([.streamedPaths(next, replace: replace)], recording: position))
    }

    /// One client's batch of offline writes (two-way sync), as ``PushBatch`` describes it.
    ///
    /// ```swift
    /// let outcome = try await store.push(mutations, from: "phone-1", user: nil, to: "notes",
    ///                                    retention: PushRetention(), merge: .fields, attachments: .unchecked)
    /// ```
    package func push(
        _ mutations: [ParsedMutation], from client: String, user: String?, to collection: String, retention: PushRetention, merge: MergePolicy,
        attachments: AttachmentProof
    ) async throws -> PushOutcome {
        let batch = PushBatch(mutations, from: client, user: user, to: collection, retention: retention, merge: merge, attachments: attachments)
        for case .pushed(_, let outcome) in try await commit(StoreWrite([.push(batch)])) { return outcome }
        preconditionFailure("a store committed a push without its outcome")
    }

    /// Writes one publication of review before publish in one transaction (see ``ReviewPublication``).
    package func publish(_ publication: ReviewPublication) async throws -> [WriteResult] {
        try await written(StoreWrite([.publish(publication)]))
    }
}
