import DeltaSnapCore
import Foundation

/// A live query over every partition of one collection of a ``DeltaSnapView``
/// (``DeltaSnapView/observe(_:_:)``).
///
/// A view's partitions commit through their own replicas (each its own connection to the
/// view's file, on its own actor) and the view drops partitions through its own. So one
/// observation is registered with each of them; whichever commits decides, by the ids it
/// changed, whether the query can be affected, re-runs it over all partitions on its own
/// connection (one file: it sees every partition) and yields the result if it differs. The
/// lock serialises storages committing at once, so results are yielded in commit order.
final class CrossPartitionObservation: @unchecked Sendable {
    let collection: String
    let query: ReplicaQuery
    private let continuation: AsyncThrowingStream<[JSONValue], any Error>.Continuation
    private let counts: LiveQueryCountsBox
    private let lock = NSLock()
    /// nil until ``start(with:)``: the view reads the first result after registering, so a
    /// commit in between is not missed — it only marks the first read as possibly stale.
    private var results: [JSONValue]?
    private var ids: Set<String> = []
    private var missedWhileStarting = false
    private var ended = false

    init(collection: String, query: ReplicaQuery, continuation: AsyncThrowingStream<[JSONValue], any Error>.Continuation, counts: LiveQueryCountsBox) {
        self.collection = collection
        self.query = query
        self.continuation = continuation
        self.counts = counts
        continuation.onTermination = { [weak self] _ in self?.end() }
    }

    /// Whether the consumer went away (or a re-run failed): every storage drops it at its next commit.
    var hasEnded: Bool { lock.withLock { ended } }

    /// Hands over the first result, read by the view after registering. False when a commit
    /// came in between: the caller reads again.
    func start(with current: [JSONValue]) -> Bool {
        lock.withLock {
            guard !missedWhileStarting else {
                missedWhileStarting = false
                return false
            }
            results = current
            ids = Self.ids(of: current)
            continuation.yield(current)
            return true
        }
    }

    /// After `storage` committed `changes` (in one partition, or the view's drop of one):
    /// re-runs the query over the whole collection when they may affect it. `visible` reads a
    /// changed record as the app now sees it, in the partition that committed.
    func refresh(after changes: ReplicaChanges, in storage: ReplicaStorage, visible: (String) throws -> JSONValue?) throws {
        lock.lock()
        defer { lock.unlock() }
        guard !ended else { return }
        // The view's own storage commits for every collection (a partition dropped): only
        // this collection's partitions concern this query.
        if let committed = CollectionPath(storage.scope.collection), committed.key != nil, committed.name != collection { return }
        guard let results else {
            missedWhileStarting = true
            return
        }
        guard try changes.everything || changes.ids.contains(where: { try ids.contains($0) || visible($0).map(query.matches) == true }) else {
            return
        }
        var fresh: [JSONValue] = []
        do {
            try storage.acrossPartitions(of: collection) {
                try storage.query(query) { fresh.append(try JSONReader(bytes: Array($0)).readValue()) }
            }
        } catch {
            ended = true
            continuation.finish(throwing: error)
            throw error
        }
        counts.add(LiveQueryCounts(reruns: 1))
        guard fresh != results else { return }
        self.results = fresh
        ids = Self.ids(of: fresh)
        counts.add(LiveQueryCounts(notifications: 1))
        continuation.yield(fresh)
    }

    private func end() {
        lock.withLock { ended = true }
    }

    /// The ids in a result, of whichever partition: a changed record with one of them may
    /// have left it (ids of different partitions may be equal: that only re-runs once more).
    private static func ids(of results: [JSONValue]) -> Set<String> {
        Set(results.compactMap { if case .string(let id)? = $0[Record.idKey] { id } else { nil } })
    }
}

/// The live-query work of a whole view (its observations across partitions), as
/// ``DeltaSnapView/observationCounts`` reports it.
final class LiveQueryCountsBox: @unchecked Sendable {
    private let lock = NSLock()
    private var counts = LiveQueryCounts()

    var value: LiveQueryCounts { lock.withLock { counts } }

    func add(_ more: LiveQueryCounts) {
        lock.withLock {
            counts.reruns += more.reruns
            counts.notifications += more.notifications
        }
    }
}
