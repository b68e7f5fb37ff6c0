// Live queries (issue 47): an indexed query of 20 results observed on a replica of 10k and of
// 1M records; a local write that changes its result, timed until the observer holds the new
// result — beside the same write with nobody observing (the reference, same run).

import Benchmark
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSynthetic
import Foundation

/// The observed replica and its observer's iterator (each benchmark runs in its own process).
final class LiveQueryFixtures: @unchecked Sendable {
    var replica: DeltaSnapReplica?
    var results: AsyncThrowingStream<[JSONValue], any Error>.AsyncIterator?
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
                        let replica = try await bundledReplica(count: count, root: "live-\(label)")
                        try await replica.createIndex(on: "price")
                        if observed {
                            var iterator = try await replica.observe(cheapest).makeAsyncIterator()
                            _ = try await iterator.next()
                            liveQueryFixtures.results = iterator
                        }
                        liveQueryFixtures.replica = replica
                    },
                    teardown: {
                        liveQueryFixtures.results = nil
                        liveQueryFixtures.replica = nil
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
