// Two-way sync: a local write, reads with and without pending writes, and pushing 10,000
// queued writes to a real server on 127.0.0.1 (started in-process by the benchmark's setup).

import Benchmark
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTrust
import Foundation

/// State of the two-way sync benchmarks (each benchmark runs in its own process).
final class SyncFixtures: @unchecked Sendable {
    var replica: DeltaSnapReplica?
    var serverTask: Task<Void, any Error>?
    var url: URL?
}

nonisolated(unsafe) let syncFixtures = SyncFixtures()

/// A replica of `count` records loaded from a baked snapshot (no server needed).
func bundledReplica(count: Int, root: String = "two-way") async throws -> DeltaSnapReplica {
    let snapshot = try await bakedSnapshot(root: root, count: count)
    return try DeltaSnapReplica(
        path: fixtures.path("replica.sqlite"), collection: collection,
        url: URL(string: "http://127.0.0.1:9/v1/collections/\(collection)")!,
        bundledSnapshot: snapshot)
}

/// Starts `deltasnap serve`'s server in this process on an ephemeral port.
func startServer(database: String, signingKeys: [IndexSigningKey] = []) async throws -> URL {
    try await startServer(store: try SQLiteCollectionStore(path: database), signingKeys: signingKeys)
}

/// Starts `deltasnap serve`'s server over `store` (which the caller may keep writing to, as
/// an importer beside the server would) in this process on an ephemeral port.
func startServer(store: SQLiteCollectionStore, signingKeys: [IndexSigningKey] = []) async throws -> URL {
    let server = try await DeltaSnapServer(store: store, configuration: .init(writeToken: "bench", signingKeys: signingKeys))
    let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
    syncFixtures.serverTask = Task {
        try await server.run(host: "127.0.0.1", port: 0, handleSignals: false) { port in
            continuation.yield(port)
            continuation.finish()
        }
    }
    var iterator = ports.makeAsyncIterator()
    guard let port = await iterator.next() else { throw CancellationError() }
    return URL(string: "http://127.0.0.1:\(port)/v1/collections/\(collection)")!
}

func twoWaySyncBenchmarks() {
    Benchmark(
        "Local write (patch of one field), 10k-record replica",
        configuration: .init(
            metrics: [.wallClock],
            warmupIterations: 10,
            maxDuration: .seconds(5),
            maxIterations: 2000,
            setup: { syncFixtures.replica = try await bundledReplica(count: 10_000) },
            teardown: {
                syncFixtures.replica = nil
                fixtures.removeAll()
            }
        )
    ) { benchmark in
        guard let replica = syncFixtures.replica else { return }
        fixtures.counter += 1
        let id = SyntheticRecords.id(fixtures.counter % 10_000)
        benchmark.startMeasurement()
        try await replica.patch(id: id, json: #"{"note":"edited \#(fixtures.counter)"}"#)
        benchmark.stopMeasurement()
    }

    for pending in [false, true] {
        Benchmark(
            pending ? "Read one record with a pending write" : "Read one record, no pending write",
            configuration: .init(
                metrics: [.wallClock],
                warmupIterations: 10,
                maxDuration: .seconds(3),
                maxIterations: 5000,
                setup: {
                    let replica = try await bundledReplica(count: 10_000)
                    if pending { try await replica.patch(id: SyntheticRecords.id(42), json: #"{"note":"pending"}"#) }
                    syncFixtures.replica = replica
                },
                teardown: {
                    syncFixtures.replica = nil
                    fixtures.removeAll()
                }
            )
        ) { benchmark in
            guard let replica = syncFixtures.replica else { return }
            benchmark.startMeasurement()
            let bytes = try await replica.recordBytes(id: SyntheticRecords.id(42))
            benchmark.stopMeasurement()
            blackHole(bytes)
        }
    }

    Benchmark(
        "Push 10,000 queued writes and pull them back (loopback server)",
        configuration: .init(
            metrics: [.wallClock, .peakMemoryResident],
            warmupIterations: 0,
            maxDuration: .seconds(30),
            maxIterations: 3,
            setup: {
                try fixtures.makeRoot("push")
                let storePath = fixtures.path("store.sqlite")
                _ = try await buildStore(at: storePath, count: 10_000)
                syncFixtures.url = try await startServer(database: storePath)
            },
            teardown: {
                syncFixtures.serverTask?.cancel()
                _ = await syncFixtures.serverTask?.result
                fixtures.removeAll()
            }
        )
    ) { benchmark in
        guard let url = syncFixtures.url else { return }
        let replica = try DeltaSnapReplica(path: fixtures.nextPath("replica.sqlite"), collection: collection, url: url, accessToken: "bench")
        await replica.sync()
        // The offline-quiz case: 10,000 answers queued on a train.
        let round = fixtures.counter
        let answers = (0..<10_000).map { index in
            try! Record(json: Array(#"{"id":"answer-\#(round)-\#(index)","question":\#(index),"choice":"b"}"#.utf8))
        }
        _ = try await replica.write(answers, operation: .insert)
        let start = clock.now
        benchmark.startMeasurement()
        await replica.sync()
        benchmark.stopMeasurement()
        let elapsed = seconds(start.duration(to: clock.now))
        let report = await replica.lastPushReport
        precondition(report.accepted == 10_000 && report.refused.isEmpty, "pushed \(report)")
        let left = try await replica.pendingWrites()
        precondition(left.isEmpty, "\(left.count) writes still pending")
        benchmark.measurement(recordsPerSecond, Int(10_000 / elapsed))
    }
}
