// Signed data: the LtHash16 digest per record, and a signed 1-record delta on replicas of
// 10k and 1M records — verifying it must cost the same whatever the replica's size.

import Benchmark
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTrust
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// State of the signed-data benchmarks (each benchmark runs in its own process).
final class SignedFixtures: @unchecked Sendable {
    var store: SQLiteCollectionStore?
    var replica: DeltaSnapReplica?
    var headURL: URL?
    var round = 0
}

nonisolated(unsafe) let signedFixtures = SignedFixtures()

func signedDataBenchmarks() {
    Benchmark(
        "LtHash16: add one ~300-byte record to a state digest",
        configuration: .init(metrics: [.wallClock, .throughput], warmupIterations: 10, maxDuration: .seconds(3), maxIterations: 100_000)
    ) { benchmark in
        let record = SyntheticRecords(seed: seed).record(index: benchmark.currentIteration)
        var digest = StateDigest.empty
        benchmark.startMeasurement()
        digest.add(collection: collection, id: record.id, canonical: record.bytes)
        benchmark.stopMeasurement()
        Benchmark.blackHole(digest)
    }

    for (label, count) in [("10k", 10_000), ("1M", 1_000_000)] {
        Benchmark(
            "Signed pull of a 1-record delta on a \(label)-record replica (index + delta + verify)",
            configuration: .init(
                metrics: [.wallClock],
                warmupIterations: 1,
                maxDuration: .seconds(20),
                maxIterations: 20,
                setup: {
                    try fixtures.makeRoot("signed-\(label)")
                    let storePath = fixtures.path("store.sqlite")
                    _ = try await buildStore(at: storePath, count: count)
                    let key = IndexSigningKey.generate()
                    let url = try await startServer(database: storePath, signingKeys: [key])
                    let replica = try DeltaSnapReplica(
                        path: fixtures.path("replica.sqlite"), collection: collection, url: url, trustedKeys: [key.publicKey])
                    let first = await replica.pull()
                    precondition(first.name == "full", "first pull: \(first)")
                    signedFixtures.store = try SQLiteCollectionStore(path: storePath)
                    signedFixtures.replica = replica
                    signedFixtures.headURL = url
                },
                teardown: {
                    signedFixtures.replica = nil
                    syncFixtures.serverTask?.cancel()
                    _ = await syncFixtures.serverTask?.result
                    fixtures.removeAll()
                }
            )
        ) { benchmark in
            guard let store = signedFixtures.store, let replica = signedFixtures.replica, let url = signedFixtures.headURL else { return }
            signedFixtures.round += 1
            let changed = try Record(json: Array(#"{"id":"\#(SyntheticRecords.id(7))","round":\#(signedFixtures.round)}"#.utf8))
            let token = try await store.write([changed], to: collection).token!.description
            // Wait until the server serves the new head (it polls for outside commits every 100 ms).
            while true {
                var request = URLRequest(url: url)
                request.httpMethod = "HEAD"
                let (_, response) = try await URLSession.shared.data(for: request)
                if (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "ETag") == "\"\(token)\"" { break }
                try await Task.sleep(for: .milliseconds(5))
            }
            benchmark.startMeasurement()
            let outcome = await replica.pull(ignoringBackoff: true)
            benchmark.stopMeasurement()
            precondition(outcome.name == "delta", "expected a verified delta, got \(outcome)")
        }
    }
}
