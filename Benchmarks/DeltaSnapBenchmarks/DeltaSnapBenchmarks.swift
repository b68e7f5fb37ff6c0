// DeltaSnap benchmarks (ordo-one/benchmark). Run with `make bench` (DELTASNAP_BENCHMARKS=1 adds this target to the package).
// See docs/BENCHMARKS.md for the figures and targets.
//
// The benchmark tool starts one process per benchmark, so each benchmark's `setup` builds the
// fixtures it needs (once, not per iteration) under its own temporary directory and its
// `teardown` deletes them. Large benchmarks run a single measured iteration without warm-up.
//
// Metrics: `.wallClock` per iteration, plus a custom `records/s` metric computed from the measured
// time (the built-in `.throughput` counts iterations per second, which rounds to 0 for
// multi-second iterations). ARC metrics crash with this toolchain and `.instructions` is absent,
// so neither is used.

import Benchmark
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapSynthetic
import Foundation

// MARK: - Shared helpers

let seed: UInt64 = 42
let collection = "items"

/// `records/s` for one measured iteration.
let recordsPerSecond = BenchmarkMetric.custom("records/s", polarity: .prefersLarger, useScalingFactor: false)
/// Uncompressed megabytes per second through the compressor.
let megabytesPerSecond = BenchmarkMetric.custom("MB/s (input)", polarity: .prefersLarger, useScalingFactor: false)

/// Per-process fixture state (each benchmark runs in its own process).
final class Fixtures: @unchecked Sendable {
    var root = ""
    var ndjson: [UInt8] = []
    var ndjsonPath = ""
    var store: SQLiteCollectionStore?
    var bakingStore: SQLiteCollectionStore?
    var storePath = ""
    var snapshotPath = ""
    /// The collection version just before the last 10 changes (delta benchmarks).
    var versionBeforeChanges: UInt64 = 0
    var counter = 0

    func makeRoot(_ label: String) throws {
        root = (NSTemporaryDirectory() as NSString)
            .appendingPathComponent("deltasnap-bench-\(ProcessInfo.processInfo.processIdentifier)-\(label)")
        try? FileManager.default.removeItem(atPath: root)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { (root as NSString).appendingPathComponent(name) }

    /// A fresh path for one iteration's output.
    func nextPath(_ prefix: String) -> String {
        counter += 1
        return path("\(prefix)-\(counter)")
    }

    func removeAll() {
        store = nil
        bakingStore = nil
        ndjson = []
        if !root.isEmpty { try? FileManager.default.removeItem(atPath: root) }
        root = ""
    }
}

nonisolated(unsafe) let fixtures = Fixtures()

/// NDJSON of records 0..<count at `revision`, one canonical line each.
func ndjsonBytes(count: Int, revision: Int = 0, from start: Int = 0) -> [UInt8] {
    let generator = SyntheticRecords(seed: seed)
    var out: [UInt8] = []
    out.reserveCapacity(count * 340)
    for index in start..<(start + count) {
        out.append(contentsOf: generator.json(index: index, revision: revision))
        out.append(0x0A)
    }
    return out
}

/// Writes NDJSON of records 0..<count to `path` in 10k-record chunks (bounded memory).
func writeNDJSON(count: Int, to path: String) throws {
    guard FileManager.default.createFile(atPath: path, contents: nil),
          let file = FileHandle(forWritingAtPath: path)
    else { throw FileError(path: path, reason: "cannot be created") }
    defer { try? file.close() }
    var start = 0
    while start < count {
        let n = min(10_000, count - start)
        try file.write(contentsOf: ndjsonBytes(count: n, from: start))
        start += n
    }
}

/// A store at `path` holding `count` records (imported from a temporary NDJSON file), then
/// `changes` records changed in a second version. Returns the version before the changes.
@discardableResult
func buildStore(at path: String, count: Int, changes: Int = 0) async throws -> UInt64 {
    let store = try SQLiteCollectionStore(path: path)
    defer { Task { await store.close() } }
    let source = path + ".ndjson"
    try writeNDJSON(count: count, to: source)
    let first = try await store.importRecords(
        from: RecordStream(source: try ChunkSources.file(at: source), name: source), into: collection, replace: false, progress: nil)
    try? FileManager.default.removeItem(atPath: source)
    let before = first.head?.version ?? 0
    if changes > 0 {
        // Spread the changed records over the whole id range.
        let generator = SyntheticRecords(seed: seed)
        var bytes: [UInt8] = []
        let stride = max(1, count / changes)
        for k in 0..<changes {
            bytes.append(contentsOf: generator.json(index: k * stride, revision: 1))
            bytes.append(0x0A)
        }
        _ = try await store.importBatch(bytes, into: collection)
    }
    return before
}

/// A fresh fixtures root named `root` holding the baked snapshot of `count` synthetic
/// records (the store that baked it removed); returns the snapshot's path.
func bakedSnapshot(root: String, count: Int) async throws -> String {
    try fixtures.makeRoot(root)
    let storePath = fixtures.path("store.sqlite")
    _ = try await buildStore(at: storePath, count: count)
    try await SQLiteCollectionStore(path: storePath, readOnly: true).bake(collection, into: fixtures.path("snapshots"))
    removeSQLite(storePath)
    return fixtures.path("snapshots/\(collection).snapshot")
}

func removeSQLite(_ path: String) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        try? FileManager.default.removeItem(atPath: path + suffix)
    }
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

let clock = ContinuousClock()

// MARK: - Benchmarks

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .peakMemoryResident, .mallocCountTotal],
        warmupIterations: 1,
        maxDuration: .seconds(3),
        maxIterations: 50
    )

    // MARK: Import (records/s)

    for (label, count, iterations) in [("1k", 1_000, 20), ("100k", 100_000, 3), ("1M", 1_000_000, 1)] {
        Benchmark(
            "Import \(label) records",
            configuration: .init(
                metrics: [.wallClock, recordsPerSecond, .peakMemoryResident, .mallocCountTotal],
                warmupIterations: count >= 100_000 ? 0 : 1,
                maxDuration: .seconds(count >= 1_000_000 ? 60 : 5),
                maxIterations: iterations,
                setup: {
                    try fixtures.makeRoot("import-\(label)")
                    fixtures.ndjson = ndjsonBytes(count: count)
                },
                teardown: { fixtures.removeAll() }
            )
        ) { benchmark in
            let path = fixtures.nextPath("import.sqlite")
            // The path `deltasnap import` takes: the public store, its writer queue, one version.
            let store = try SQLiteCollectionStore(path: path)
            let start = clock.now
            benchmark.startMeasurement()
            let result = try await store.importRecords(
                from: RecordStream(source: ChunkSources.bytes(fixtures.ndjson), name: "synthetic"), into: collection, replace: false, progress: nil)
            benchmark.stopMeasurement()
            await store.close()
            let elapsed = seconds(start.duration(to: clock.now))
            precondition(result.upserted == count, "imported \(result.upserted) of \(count)")
            benchmark.measurement(recordsPerSecond, Int(Double(count) / elapsed))
            removeSQLite(path)
        }
    }

    // MARK: Bake 1M vs gzip -6 / zlib level 6 on the same NDJSON

    Benchmark(
        "Bake 1M records (gzip level 6)",
        configuration: .init(
            metrics: [.wallClock, recordsPerSecond, .peakMemoryResident],
            warmupIterations: 0,
            maxDuration: .seconds(30),
            maxIterations: 2,
            setup: {
                try fixtures.makeRoot("bake")
                fixtures.storePath = fixtures.path("store.sqlite")
                try await buildStore(at: fixtures.storePath, count: 1_000_000)
                fixtures.bakingStore = try SQLiteCollectionStore(path: fixtures.storePath, readOnly: true)
            },
            teardown: { fixtures.removeAll() }
        )
    ) { benchmark in
        let out = fixtures.nextPath("baked")
        let start = clock.now
        benchmark.startMeasurement()
        let entry = try await fixtures.bakingStore!.bake(collection, into: out)
        benchmark.stopMeasurement()
        let elapsed = seconds(start.duration(to: clock.now))
        precondition(entry.count == 1_000_000)
        benchmark.measurement(recordsPerSecond, Int(1_000_000 / elapsed))
        try? FileManager.default.removeItem(atPath: out)
    }

    Benchmark(
        "gzip -6 subprocess on 1M-record NDJSON",
        configuration: .init(
            metrics: [.wallClock, recordsPerSecond],
            warmupIterations: 0,
            maxDuration: .seconds(30),
            maxIterations: 2,
            setup: {
                try fixtures.makeRoot("gzip")
                fixtures.ndjsonPath = fixtures.path("records.ndjson")
                try writeNDJSON(count: 1_000_000, to: fixtures.ndjsonPath)
            },
            teardown: { fixtures.removeAll() }
        )
    ) { benchmark in
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/gzip")
        process.arguments = ["-6", "-c", fixtures.ndjsonPath]
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        let start = clock.now
        benchmark.startMeasurement()
        try process.run()
        process.waitUntilExit()
        benchmark.stopMeasurement()
        let elapsed = seconds(start.duration(to: clock.now))
        precondition(process.terminationStatus == 0, "gzip failed")
        benchmark.measurement(recordsPerSecond, Int(1_000_000 / elapsed))
    }

    Benchmark(
        "zlib level 6 in-process on 1M-record NDJSON",
        configuration: .init(
            metrics: [.wallClock, megabytesPerSecond],
            warmupIterations: 0,
            maxDuration: .seconds(30),
            maxIterations: 2,
            setup: { fixtures.ndjson = ndjsonBytes(count: 1_000_000) },
            teardown: { fixtures.removeAll() }
        )
    ) { benchmark in
        let input = fixtures.ndjson
        let start = clock.now
        benchmark.startMeasurement()
        let compressor = try GzipCompressor(level: 6)
        var out: [UInt8] = []
        out.reserveCapacity(256 * 1024)
        var total = 0
        var offset = 0
        input.withUnsafeBytes { all in
            while offset < all.count {
                let end = min(offset + ChunkSources.chunkSize, all.count)
                compressor.compress(UnsafeRawBufferPointer(rebasing: all[offset..<end]), into: &out)
                total += out.count
                out.removeAll(keepingCapacity: true)
                offset = end
            }
        }
        compressor.finish(into: &out)
        total += out.count
        benchmark.stopMeasurement()
        let elapsed = seconds(start.duration(to: clock.now))
        Benchmark.blackHole(total)
        benchmark.measurement(megabytesPerSecond, Int(Double(input.count) / 1e6 / elapsed))
    }

    // MARK: Delta query cost against collection size (10 changes)

    for (label, count) in [("1k", 1_000), ("1M", 1_000_000)] {
        Benchmark(
            "Delta query, 10 changes on \(label) records",
            configuration: .init(
                metrics: [.wallClock, .mallocCountTotal],
                warmupIterations: 10,
                maxDuration: .seconds(2),
                maxIterations: 2_000,
                setup: {
                    try fixtures.makeRoot("delta-\(label)")
                    fixtures.storePath = fixtures.path("store.sqlite")
                    fixtures.versionBeforeChanges = try await buildStore(at: fixtures.storePath, count: count, changes: 10)
                    fixtures.store = try SQLiteCollectionStore(path: fixtures.storePath, readOnly: true)
                },
                teardown: { fixtures.removeAll() }
            )
        ) { benchmark in
            let after = fixtures.versionBeforeChanges
            // What a delta response reads: one read transaction on a pooled connection.
            let source = try await fixtures.store!.openRecords(in: collection, after: after)
            let changed = source.count
            var bytes = 0
            while try await source.next({ bytes += $0.count }) {}
            await source.close()
            precondition(changed == 10, "expected 10 changes, got \(changed)")
            Benchmark.blackHole(bytes)
        }
    }

    // MARK: Client apply (bundled snapshot into a fresh replica: the same BodyApplier path as a full sync)

    for (label, count, iterations) in [("10k", 10_000, 10), ("1M", 1_000_000, 2)] {
        Benchmark(
            "Client apply \(label) records (bundled snapshot)",
            configuration: .init(
                metrics: [.wallClock, recordsPerSecond, .peakMemoryResident, .peakMemoryResidentDelta, .mallocCountTotal],
                warmupIterations: count >= 1_000_000 ? 0 : 1,
                maxDuration: .seconds(count >= 1_000_000 ? 60 : 5),
                maxIterations: iterations,
                setup: {
                    fixtures.snapshotPath = try await bakedSnapshot(root: "apply-\(label)", count: count)
                },
                teardown: { fixtures.removeAll() }
            )
        ) { benchmark in
            let path = fixtures.nextPath("replica.sqlite")
            let start = clock.now
            benchmark.startMeasurement()
            let replica = try DeltaSnapReplica(
                path: path, collection: collection,
                url: URL(string: "http://127.0.0.1:9/v1/collections/\(collection)")!,
                bundledSnapshot: fixtures.snapshotPath)
            benchmark.stopMeasurement()
            let elapsed = seconds(start.duration(to: clock.now))
            let held = await replica.count
            precondition(held == count, "replica holds \(held) of \(count)")
            benchmark.measurement(recordsPerSecond, Int(Double(count) / elapsed))
            removeSQLite(path)
        }
    }

    // MARK: Bundled first start: open + load the bundled snapshot (or open the baked replica in place) + first read

    let firstStarts: [(name: String, count: Int, replica: Bool, iterations: Int)] = [
        ("Bundled first start, 100k records", 100_000, false, 5),
        ("Bundled first start from a replica, 1k records", 1_000, true, 20),
        ("Bundled first start from a replica, 1M records", 1_000_000, true, 20),
    ]
    for (name, count, replica, iterations) in firstStarts {
        Benchmark(
            name,
            configuration: .init(
                metrics: [.wallClock, .peakMemoryResident, .peakMemoryResidentDelta],
                warmupIterations: 1,
                maxDuration: .seconds(10),
                maxIterations: iterations,
                setup: {
                    fixtures.snapshotPath = try await bakedSnapshot(root: "first-start-\(count)-\(replica)", count: count)
                    if replica {
                        let baked = fixtures.path("snapshots/\(collection).replica")
                        try BundledReplica.bake(snapshot: fixtures.snapshotPath, collection: collection, to: baked)
                        fixtures.snapshotPath = baked
                    }
                },
                teardown: { fixtures.removeAll() }
            )
        ) { benchmark in
            let path = fixtures.nextPath("replica.sqlite")
            benchmark.startMeasurement()
            let opened = try DeltaSnapReplica(
                path: path, collection: collection,
                url: URL(string: "http://127.0.0.1:9/v1/collections/\(collection)")!,
                bundledSnapshot: fixtures.snapshotPath)
            let first = try await opened.recordBytes(id: SyntheticRecords.id(count / 2))
            benchmark.stopMeasurement()
            let held = await opened.count
            precondition(first != nil && held == count, "replica holds \(held) of \(count)")
            removeSQLite(path)
        }
    }

    // MARK: Queries on the replica (1M records, indexed field)

    Benchmark(
        "Indexed query on a 1M-record replica (city = …, first 50)",
        configuration: .init(
            metrics: [.wallClock, .peakMemoryResident],
            warmupIterations: 2,
            maxDuration: .seconds(10),
            maxIterations: 200,
            setup: {
                let replica = try await bundledReplica(count: 1_000_000, root: "query-1M")
                try await replica.createIndex(on: "city")
                syncFixtures.replica = replica
            },
            teardown: { syncFixtures.replica = nil; fixtures.removeAll() }
        )
    ) { benchmark in
        let replica = syncFixtures.replica!
        benchmark.startMeasurement()
        let results = try await replica.query(ReplicaQuery().filter("city", .equal, .string("Nuuk")).limit(50))
        precondition(results.count == 50)
        benchmark.stopMeasurement()
        Benchmark.blackHole(results)
    }

    twoWaySyncBenchmarks()
    signedDataBenchmarks()
    liveQueryBenchmarks()
    pulledDeltaLiveQueryBenchmarks()
}
