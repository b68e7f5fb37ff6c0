import DeltaSnapCore
import Foundation

/// What one committed transaction changed in a replica as the app sees it: the ids of the
/// records whose visible value may differ, or everything (a full body, a bundle loaded, or
/// more ids than are worth looking at one by one).
struct ReplicaChanges: Equatable {
    /// Past this many ids a transaction counts as everything: each live query then runs once,
    /// which costs less than reading every changed record to decide which need to.
    static let idLimit = 256

    private(set) var ids: Set<String> = []
    private(set) var everything = false

    var isEmpty: Bool { !everything && ids.isEmpty }

    mutating func insert(_ id: String) {
        guard !everything else { return }
        ids.insert(id)
        if ids.count > Self.idLimit { insertEverything() }
    }

    mutating func insertEverything() {
        everything = true
        ids = []
    }
}

/// How much work a replica's live queries (``DeltaSnapReplica/observe(_:)``) have made since it
/// was opened: an app can log it to see what its screens cost, and the tests and benchmarks
/// hold "only a change that can affect a query runs it" with it.
///
/// ```swift
/// let counts = await replica.observationCounts
/// logger.debug("live queries: \(counts.reruns) re-runs, \(counts.notifications) new results")
/// ```
public struct LiveQueryCounts: Equatable, Sendable {
    /// Queries run again after a commit.
    public var reruns = 0
    /// Values handed to observers after a commit (the first value of each is not counted).
    public var notifications = 0

    public init(reruns: Int = 0, notifications: Int = 0) {
        self.reruns = reruns
        self.notifications = notifications
    }
}

/// The live queries and records of one replica (``DeltaSnapReplica/observe(_:)``,
/// ``DeltaSnapReplica/observe(id:)``): after every committed transaction, ``ReplicaStorage``
/// hands it what changed, and it re-runs only the queries a changed record can affect — one
/// in the result before, or passing the filters now — and yields only results that differ.
///
/// Delivery runs on the replica's actor, inside the storage call that committed, so a
/// notification is never late and never out of order; only removal (a consumer that stopped
/// listening) comes from elsewhere, hence the lock (``LockedValue``).
package final class ReplicaObservers: Sendable {
    private enum Observer: Sendable {
        case query(ReplicaQuery, results: [JSONValue], ids: Set<String>, AsyncThrowingStream<[JSONValue], any Error>.Continuation)
        case record(id: String, value: JSONValue?, AsyncThrowingStream<JSONValue?, any Error>.Continuation)
        /// A view's query over all partitions of a collection, shared with the other storages
        /// of the view's file: it keeps its own result and ends its own stream.
        case acrossPartitions(CrossPartitionObservation)

        func finish(throwing error: any Error) {
            switch self {
            case .query(_, _, _, let continuation): continuation.finish(throwing: error)
            case .record(_, _, let continuation): continuation.finish(throwing: error)
            case .acrossPartitions: break
            }
        }
    }

    private struct State {
        var observers: [UInt64: Observer] = [:]
        var nextKey: UInt64 = 0
        var counts = Counts()
    }

    private let state = LockedValue(State())

    typealias Counts = LiveQueryCounts

    var isObserving: Bool { state.withLock { !$0.observers.isEmpty } }
    var statistics: Counts { state.withLock { $0.counts } }

    // MARK: - Registering

    /// Starts observing `query`, whose current result the caller just read as `results`.
    func add(
        _ query: ReplicaQuery, results: [JSONValue], continuation: AsyncThrowingStream<[JSONValue], any Error>.Continuation
    ) {
        let key = register(.query(query, results: results, ids: Self.ids(of: results), continuation))
        continuation.onTermination = { [weak self] _ in self?.remove(key) }
    }

    /// Starts observing record `id`, whose current value the caller just read as `value`.
    func add(id: String, value: JSONValue?, continuation: AsyncThrowingStream<JSONValue?, any Error>.Continuation) {
        let key = register(.record(id: id, value: value, continuation))
        continuation.onTermination = { [weak self] _ in self?.remove(key) }
    }

    /// Adds a view's observation across partitions (it is registered with every storage of
    /// the view's file that commits to its collection). It leaves at the first commit after
    /// its consumer went away.
    func add(_ observation: CrossPartitionObservation) {
        _ = register(.acrossPartitions(observation))
    }

    private func register(_ observer: Observer) -> UInt64 {
        state.withLock {
            $0.nextKey += 1
            $0.observers[$0.nextKey] = observer
            return $0.nextKey
        }
    }

    private func remove(_ key: UInt64) {
        _ = state.withLock { $0.observers.removeValue(forKey: key) }
    }

    // MARK: - Delivering

    /// After a commit that changed `changes`: re-runs what they may affect with `storage`
    /// (the replica's, on its actor) and yields what changed. A failing read ends that
    /// observer's sequence with the error.
    func deliver(_ changes: ReplicaChanges, from storage: ReplicaStorage) {
        let current = state.withLock { $0.observers }
        var visible: [String: JSONValue?] = [:]
        // The record as the app sees it now: read once per delivery, whichever observers ask.
        func now(_ id: String) throws -> JSONValue? {
            if let known = visible[id] { return known }
            let value = try storage.record(id: id).map { try JSONReader(bytes: $0).readValue() }
            visible[id] = .some(value)
            return value
        }
        var updated: [UInt64: Observer] = [:]
        var finished: [UInt64] = []
        var reruns = 0
        var notifications = 0
        for (key, observer) in current {
            do {
                switch observer {
                case .query(let query, let results, let ids, let continuation):
                    guard try changes.everything || changes.ids.contains(where: { try ids.contains($0) || now($0).map(query.matches) == true }) else { continue }
                    reruns += 1
                    var fresh: [JSONValue] = []
                    try storage.query(query) { fresh.append(try JSONReader(bytes: Array($0)).readValue()) }
                    guard fresh != results else { continue }
                    notifications += 1
                    continuation.yield(fresh)
                    updated[key] = .query(query, results: fresh, ids: Self.ids(of: fresh), continuation)
                case .record(let id, let value, let continuation):
                    guard changes.everything || changes.ids.contains(id) else { continue }
                    let fresh = try now(id)
                    guard fresh != value else { continue }
                    notifications += 1
                    continuation.yield(fresh)
                    updated[key] = .record(id: id, value: fresh, continuation)
                case .acrossPartitions(let observation):
                    guard !observation.hasEnded else {
                        finished.append(key)
                        continue
                    }
                    try observation.refresh(after: changes, in: storage, visible: now)
                }
            } catch {
                observer.finish(throwing: error)
                finished.append(key)
            }
        }
        state.withLock { state in
            // An observer removed meanwhile (its consumer went away) stays removed.
            for (key, observer) in updated where state.observers[key] != nil { state.observers[key] = observer }
            for key in finished { state.observers[key] = nil }
            state.counts.reruns += reruns
            state.counts.notifications += notifications
        }
    }

    private static func ids(of results: [JSONValue]) -> Set<String> {
        Set(results.compactMap { if case .string(let id)? = $0[Record.idKey] { id } else { nil } })
    }
}
