import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// `deltasnap import --partition-by`, `--collection NAME/KEY`, and export/bake of one
/// partition, as a user runs them: a child process and real files, on each store.
@Suite struct PartitionedImportTests {
    @Test(arguments: TestBackend.allCases) func recordsAreSpreadOverPartitionsOneVersionEach(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(backend, in: dir)
        do { try await spread(store, dir) } catch {
            await store.stop()
            throw error
        }
        await store.stop()
    }

    private func spread(_ store: TestDatabase, _ dir: TemporaryDirectory) async throws {
        let input = try dir.write("in.ndjson", """
            {"id":"q1","set":"8271","text":"2+2"}
            {"id":"q2","set":"8271","text":"3+3"}
            {"id":"q1","set":42,"text":"one"}
            {"id":"q9","set":"alice@example.com","text":"x"}
            """)
        let first = try CLI.run(["import", "--db", store.url, "--collection", "sets", "--partition-by", "set", "--quiet", input])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.hasPrefix("sets: 3 partitions, 3 new versions: 4 upserted, 0 hidden, 0 unchanged"), "\(first.stdout)")
        #expect(try await store.head(of: "sets/8271")?.count == 2)
        #expect(try await store.head(of: "sets/42")?.version == 1)
        #expect(try await store.head(of: "sets/alice@example.com")?.count == 1)
        let exported = try CLI.run(["export", "--db", store.url, "--collection", "sets/8271"])
        #expect(exported.stdout == #"{"id":"q1","set":"8271","text":"2+2"}"# + "\n" + #"{"id":"q2","set":"8271","text":"3+3"}"# + "\n")
        // Again with one change: only that partition gets a version.
        let changed = try dir.write("changed.ndjson", #"{"id":"q2","set":"8271","text":"3+4"}"# + "\n" + #"{"id":"q1","set":42,"text":"one"}"#)
        let second = try CLI.run(["import", "--db", store.url, "--collection", "sets", "--partition-by", "set", "--quiet", changed])
        #expect(second.stdout.hasPrefix("sets: 2 partitions, 1 new versions: 1 upserted, 0 hidden, 1 unchanged"), "\(second.stdout)")
        #expect(try await store.head(of: "sets/8271")?.version == 2)
        #expect(try await store.head(of: "sets/42")?.version == 1)
        // One partition by name, and its snapshot baked into a directory of its collection.
        let one = try dir.write("one.ndjson", #"{"id":"a1","score":3}"#)
        #expect(try CLI.run(["import", "--db", store.url, "--collection", "attempts/alice", "--quiet", one]).status == 0)
        let baked = try CLI.run(["bake", "--db", store.url, "--collection", "attempts/alice", "--out", dir.file("out")])
        #expect(baked.status == 0, "\(baked.stderr)")
        let header = try Snapshot.read(path: dir.file("out/attempts/alice.snapshot"))
        #expect(header.collection == "attempts/alice" && header.count == 1)
    }

    @Test(arguments: [
        (#"{"id":"a"}"#, "has no \"set\" to partition by"),
        (#"{"id":"a","set":["x"]}"#, "must be a string or a number"),
        (#"{"id":"a","set":"has space"}"#, "not a partition key"),
        (#"{"id":"a","set":".."}"#, "not a partition key"),
    ])
    func aRecordThatNamesNoPartitionCommitsNothing(_ bad: String, _ reason: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try dir.write("in.ndjson", #"{"id":"ok","set":"1"}"# + "\n" + bad + "\n")
        let result = try CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "sets", "--partition-by", "set", "--quiet", input])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("deltasnap: \(input):2: ") && result.stderr.contains(reason), "\(result.stderr)")
        #expect(try Store(path: dir.file("s.sqlite")).head(of: "sets/1") == nil)
    }

    /// New and existing partitions in one import: the new ones written in bulk (PostgreSQL),
    /// the existing merged; a duplicate id anywhere commits nothing; every digest equals one
    /// recomputed from the records.
    @Test(arguments: TestBackend.allCases) func newAndExistingPartitionsInOneImportStateWhatARecomputationStates(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(backend, in: dir)
        do {
            try await store.importText(#"{"id":"q1","set":"old","text":"before"}"#, collection: "sets/old")
            let input = (0..<300).map { #"{"id":"q\#($0 % 7)","set":"s\#($0 / 7)","text":"t\#($0)"}"# }.joined(separator: "\n")
                + "\n" + #"{"id":"q1","set":"old","text":"after"}"# + "\n"
            let results = try await store.importPartitioned(input, collection: "sets", by: "set")
            #expect(results.count == 44 && results.allSatisfy(\.committed))
            #expect(try await store.head(of: "sets/old")?.version == 2)
            #expect(try await store.head(of: "sets/s0")?.count == 7)
            #expect(try await store.head(of: "sets/s42")?.count == 6)
            let names = ["sets/old", "sets/s0", "sets/s42"]
            let stated = try await store.store.publishedState(of: names)
            for entry in stated.entries {
                var digest = StateDigest.empty
                for line in try await store.export(entry.collection).split(separator: "\n") {
                    let record = try Record(json: Array(line.utf8))
                    digest.add(collection: entry.collection, id: record.id, canonical: record.bytes)
                }
                #expect(entry.digest == digest.fingerprint, "\(entry.collection)")
            }
            let before = try await store.publishedSequence()
            let duplicate = #"{"id":"x","set":"fresh"}"# + "\n" + #"{"id":"x","set":"fresh"}"# + "\n" + #"{"id":"q1","set":"old","text":"again"}"#
            await #expect(throws: (any Error).self) { try await store.importPartitioned(duplicate, collection: "sets", by: "set") }
            #expect(try await store.head(of: "sets/fresh") == nil)
            #expect(try await store.head(of: "sets/old")?.version == 2)
            #expect(try await store.publishedSequence() == before)
        } catch {
            await store.stop()
            throw error
        }
        await store.stop()
    }

    @Test func partitionByNeedsACollectionName() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "sets/1", "--partition-by", "set", "-"], stdin: "")
        #expect(result.status == 2 && result.stderr.contains("--partition-by needs --collection NAME"), "\(result.stderr)")
    }
}
