// Live queries (issue 47): an indexed query of 20 results observed on a replica of 10k and of
// 1M records; a local write that changes its result, timed until the observer holds the new
// result — beside the same write with nobody observing (the reference, same run).

import Benchmark
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapSynthetic
import Foundation

/// The observed replica and its observer's iterator (each benchmark runs in its own process).
final class LiveQueryFixtures: @unchecked Sendable {
    var replica: DeltaSnapReplica?
    var results: AsyncThrowingStream<[JSONValue], any Error>.AsyncIterator?

    /// Keeps `replica`, indexed on `price`, and an observer of `query` past its first value.
    func hold(_ replica: DeltaSnapReplica, observing query: ReplicaQuery?) async throws {
        try await replica.createIndex(on: "price")
        if let query {
            var iterator = try await replica.observe(query).makeAsyncIterator()
            _ = try await iterator.next()
            results = iterator
        }
        self.replica = replica
    }

    func release() {
        results = nil
        replica = nil
    }
}

nonisolated(unsafe) let liveQueryFixtures = LiveQueryFixtures()

func liveQueryBenchmarks() {
    // The 20 cheapest records, by an indexed field: each write below makes a record the cheapest.
    let cheapest = ReplicaQuery().order(by: "price").limit(20)
    for (label, count) in [("10k", 10_000), ("1M", 1_000_000)] {
        for observed in [false, true] {
            Benchmark(
                observed
                    ? "Local write that changes an observed 20-record indexed query, until the observer has it, \(label)-record replica"
                    : "The same local write, nobody observing, \(label)-record replica",
                configuration: .init(
                    metrics: [.wallClock],
                    warmupIterations: 10,
                    maxDuration: .seconds(5),
                    maxIterations: 2000,
                    setup: {
                        try await liveQueryFixtures.hold(try await bundledReplica(count: count, root: "live-\(label)"), observing: observed ? cheapest : nil)
                    },
                    teardown: {
                        liveQueryFixtures.release()
                        fixtures.removeAll()
                    }
                )
            ) { benchmark in
                guard let replica = liveQueryFixtures.replica else { return }
                fixtures.counter += 1
                let id = SyntheticRecords.id(fixtures.counter % count)
                benchmark.startMeasurement()
                try await replica.patch(id: id, json: #"{"price":-\#(fixtures.counter)}"#)
                if observed { blackHole(try await liveQueryFixtures.results?.next()) }
                benchmark.stopMeasurement()
            }
        }
    }
}

/// The server side of the pulled-delta benchmarks: the store the in-process server answers
/// from, written to directly as an importer beside `serve` would.
nonisolated(unsafe) var liveQueryServerStore: SQLiteCollectionStore?

/// A replica of `count` records, first started from the snapshot baked from the store a
/// loopback server answers from, and synced once (so the next pull is a delta).
func pulledReplica(count: Int, root: String) async throws -> DeltaSnapReplica {
    try fixtures.makeRoot(root)
    let storePath = fixtures.path("store.sqlite")
    _ = try await buildStore(at: storePath, count: count)
    let store = try SQLiteCollectionStore(path: storePath)
    try await store.bake(collection, into: fixtures.path("snapshots"))
    liveQueryServerStore = store
    let url = try await startServer(store: store)
    let replica = try DeltaSnapReplica(
        path: fixtures.path("replica.sqlite"), collection: collection, url: url,
        bundledSnapshot: fixtures.path("snapshots/\(collection).snapshot"))
    let first = await replica.pull()
    guard first.name == "delta" || first.name == "not-modified" else { fatalError("the first pull gave \(first)") }
    return replica
}

/// Live queries and pulled deltas (issue 47's goal is stated for them): a 1-record delta
/// committed on the server, then pulled; timed from the pull's start until the observer holds
/// the new result, beside the same pull with nobody observing (same run). And 1,000 pulled
/// deltas that cannot affect an observed query: they must re-run it 0 times.
func pulledDeltaLiveQueryBenchmarks() {
    let cheapest = ReplicaQuery().order(by: "price").limit(20)
    // Nothing the server sends below has a negative price: no pulled record can enter or
    // leave this query's result, so no delta may re-run it.
    let belowZero = ReplicaQuery().filter("price", .lessThan, .number("0")).order(by: "price").limit(20)
    let reruns = BenchmarkMetric.custom("live query re-runs", polarity: .prefersSmaller, useScalingFactor: false)
    for (label, count) in [("10k", 10_000), ("1M", 1_000_000)] {
        for mode in ["changes it", "nobody observing", "cannot affect it"] {
            Benchmark(
                mode == "nobody observing"
                    ? "Pull of a 1-record delta, nobody observing, \(label)-record replica"
                    : "Pull of a 1-record delta that \(mode == "changes it" ? "changes an observed 20-record indexed query, until the observer has it" : "cannot affect an observed indexed query"), \(label)-record replica",
                configuration: .init(
                    metrics: [.wallClock] + (mode == "cannot affect it" ? [reruns] : []),
                    warmupIterations: 5,
                    maxDuration: .seconds(mode == "cannot affect it" ? 180 : 5),
                    maxIterations: 1000,
                    setup: {
                        let query = mode == "nobody observing" ? nil : mode == "changes it" ? cheapest : belowZero
                        try await liveQueryFixtures.hold(try await pulledReplica(count: count, root: "pulled-\(label)"), observing: query)
                    },
                    teardown: {
                        liveQueryFixtures.release()
                        syncFixtures.serverTask?.cancel()
                        _ = await syncFixtures.serverTask?.result
                        liveQueryServerStore = nil
                        fixtures.removeAll()
                    }
                )
            ) { benchmark in
                guard let replica = liveQueryFixtures.replica, let store = liveQueryServerStore else { return }
                fixtures.counter += 1
                let index = fixtures.counter % count
                // "changes it" makes the record the cheapest; the others write a new revision,
                // whose price is never negative.
                var value = SyntheticRecords(seed: seed).value(index: index, revision: fixtures.counter)
                if mode == "changes it", case .object(var members) = value {
                    members = members.map { $0.key == "price" ? JSONMember("price", .number("-\(fixtures.counter)")) : $0 }
                    value = .object(members)
                }
                _ = try await store.importBatch(CanonicalJSON.bytes(value) + [0x0A], into: collection)
                // The server notices another writer's commit by polling the file every 20 ms.
                try await Task.sleep(for: .milliseconds(60))
                let before = await replica.observationCounts.reruns
                benchmark.startMeasurement()
                let outcome = await replica.pull()
                if mode == "changes it" { blackHole(try await liveQueryFixtures.results?.next()) }
                benchmark.stopMeasurement()
                guard outcome.name == "delta" else { fatalError("expected a delta, got \(outcome)") }
                if mode == "cannot affect it" {
                    let ran = await replica.observationCounts.reruns - before
                    guard ran == 0 else { fatalError("an unrelated delta re-ran the observed query \(ran) time(s)") }
                    benchmark.measurement(reruns, ran)
                }
            }
        }
    }
}
