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
final class CrossPartitionObservation: Sendable {
    let collection: String
    let query: ReplicaQuery
    private let continuation: AsyncThrowingStream<[JSONValue], any Error>.Continuation
    private let counts: LiveQueryCountsBox

    private struct State {
        /// nil until ``start(with:)``: the view reads the first result after registering, so a
        /// commit in between is not missed — it only marks the first read as possibly stale.
        var results: [JSONValue]?
        var ids: Set<String> = []
        var missedWhileStarting = false
        var ended = false
    }

    private let state = LockedValue(State())

    init(collection: String, query: ReplicaQuery, continuation: AsyncThrowingStream<[JSONValue], any Error>.Continuation, counts: LiveQueryCountsBox) {
        self.collection = collection
        self.query = query
        self.continuation = continuation
        self.counts = counts
        continuation.onTermination = { [weak self] _ in self?.end() }
    }

    /// Whether the consumer went away (or a re-run failed): every storage drops it at its next commit.
    var hasEnded: Bool { state.withLock { $0.ended } }

    /// Hands over the first result, read by the view after registering. False when a commit
    /// came in between: the caller reads again.
    func start(with current: [JSONValue]) -> Bool {
        state.withLock { state in
            guard !state.missedWhileStarting else {
                state.missedWhileStarting = false
                return false
            }
            state.results = current
            state.ids = Self.ids(of: current)
            continuation.yield(current)
            return true
        }
    }

    /// After `storage` committed `changes` (in one partition, or the view's drop of one):
    /// re-runs the query over the whole collection when they may affect it. `visible` reads a
    /// changed record as the app now sees it, in the partition that committed.
    func refresh(after changes: ReplicaChanges, in storage: ReplicaStorage, visible: (String) throws -> JSONValue?) throws {
        // A failed re-run ends the stream after the lock is let go: finishing it calls its
        // termination handler, which takes the lock.
        var failure: (any Error)?
        defer { if let failure { continuation.finish(throwing: failure) } }
        try state.withLock { state in
            guard !state.ended else { return }
            // The view's own storage commits for every collection (a partition dropped): only
            // this collection's partitions concern this query.
            if let committed = CollectionPath(storage.scope.collection), committed.key != nil, committed.name != collection { return }
            guard let results = state.results else {
                state.missedWhileStarting = true
                return
            }
            let ids = state.ids
            guard try changes.everything || changes.ids.contains(where: { try ids.contains($0) || visible($0).map(query.matches) == true }) else {
                return
            }
            var fresh: [JSONValue] = []
            do {
                try storage.acrossPartitions(of: collection) {
                    try storage.query(query) { fresh.append(try JSONReader(bytes: Array($0)).readValue()) }
                }
            } catch {
                state.ended = true
                failure = error
                throw error
            }
            counts.add(LiveQueryCounts(reruns: 1))
            guard fresh != results else { return }
            state.results = fresh
            state.ids = Self.ids(of: fresh)
            counts.add(LiveQueryCounts(notifications: 1))
            continuation.yield(fresh)
        }
    }

    private func end() {
        state.withLock { $0.ended = true }
    }

    /// The ids in a result, of whichever partition: a changed record with one of them may
    /// have left it (ids of different partitions may be equal: that only re-runs once more).
    private static func ids(of results: [JSONValue]) -> Set<String> {
        Set(results.compactMap { if case .string(let id)? = $0[Record.idKey] { id } else { nil } })
    }
}

/// The live-query work of a whole view (its observations across partitions), as
/// ``DeltaSnapView/observationCounts`` reports it.
final class LiveQueryCountsBox: Sendable {
    private let counts = LockedValue(LiveQueryCounts())

    var value: LiveQueryCounts { counts.withLock { $0 } }

    func add(_ more: LiveQueryCounts) {
        counts.withLock {
            $0.reruns += more.reruns
            $0.notifications += more.notifications
        }
    }
}
