import DeltaSnapCore
import DeltaSnapSQLiteStore
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
        let first = try await CLI.run(["import", "--db", store.url, "--collection", "sets", "--partition-by", "set", "--quiet", input])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.hasPrefix("sets: 3 partitions, 3 new versions: 4 upserted, 0 hidden, 0 unchanged"), "\(first.stdout)")
        #expect(try await store.head(of: "sets/8271")?.count == 2)
        #expect(try await store.head(of: "sets/42")?.version == 1)
        #expect(try await store.head(of: "sets/alice@example.com")?.count == 1)
        let exported = try await CLI.run(["export", "--db", store.url, "--collection", "sets/8271"])
        #expect(exported.stdout == #"{"id":"q1","set":"8271","text":"2+2"}"# + "\n" + #"{"id":"q2","set":"8271","text":"3+3"}"# + "\n")
        // Again with one change: only that partition gets a version.
        let changed = try dir.write("changed.ndjson", #"{"id":"q2","set":"8271","text":"3+4"}"# + "\n" + #"{"id":"q1","set":42,"text":"one"}"#)
        let second = try await CLI.run(["import", "--db", store.url, "--collection", "sets", "--partition-by", "set", "--quiet", changed])
        #expect(second.stdout.hasPrefix("sets: 2 partitions, 1 new versions: 1 upserted, 0 hidden, 1 unchanged"), "\(second.stdout)")
        #expect(try await store.head(of: "sets/8271")?.version == 2)
        #expect(try await store.head(of: "sets/42")?.version == 1)
        // One partition by name, and its snapshot baked into a directory of its collection.
        let one = try dir.write("one.ndjson", #"{"id":"a1","score":3}"#)
        #expect(try await CLI.run(["import", "--db", store.url, "--collection", "attempts/alice", "--quiet", one]).status == 0)
        let baked = try await CLI.run(["bake", "--db", store.url, "--collection", "attempts/alice", "--out", dir.file("out")])
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
    func aRecordThatNamesNoPartitionCommitsNothing(_ bad: String, _ reason: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try dir.write("in.ndjson", #"{"id":"ok","set":"1"}"# + "\n" + bad + "\n")
        let result = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "sets", "--partition-by", "set", "--quiet", input])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("deltasnap: \(input):2: ") && result.stderr.contains(reason), "\(result.stderr)")
        #expect(try SQLiteDatabase(path: dir.file("s.sqlite")).head(of: "sets/1") == nil)
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

    /// Existing partitions merged together (set-based on PostgreSQL) by the one write rule:
    /// per partition what changed, hid, came back or stayed, with and without `replace`; a
    /// version only where something changed; each state's count, checksum and digest what a
    /// recomputation from its records states.
    @Test(arguments: TestBackend.allCases) func existingPartitionsMergeByTheWriteRule(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(backend, in: dir)
        do {
            let first = (0..<40).flatMap { set in (0..<3).map { #"{"id":"q\#($0)","set":"s\#(set)","v":0}"# } }
            try await store.importPartitioned(first.joined(separator: "\n"), collection: "sets", by: "set")
            try await store.importText(#"{"id":"q0","hidden":true}"#, collection: "sets/s3")
            let second = [
                #"{"id":"q0","set":"s0","v":1}"#,                 // s0: one changed, two unchanged
                #"{"id":"q1","set":"s0","v":0}"#,
                #"{"id":"q1","set":"s1","hidden":true}"#,         // s1: one hidden
                #"{"id":"q0","set":"s2","v":0}"#,                 // s2: unchanged, no version
                #"{"id":"q0","set":"s3","v":2}"#,                 // s3: un-hidden
                #"{"id":"q9","set":"s4","v":0}"#,                 // s4: one added
                #"{"id":"q5","set":"s5","hidden":true}"#,         // s5: hiding what never was: no change
                #"{"id":"q0","set":"new","v":0}"#,                // a new partition beside them
            ].joined(separator: "\n")
            let results = Dictionary(uniqueKeysWithValues: try await store.importPartitioned(second, collection: "sets", by: "set").map { ($0.collection, $0) })
            func expect(_ name: String, committed: Bool, upserted: Int, hidden: Int, unchanged: Int, version: UInt64, count: Int) throws {
                let result = try #require(results[name])
                #expect(result.committed == committed && result.upserted == upserted && result.hidden == hidden && result.unchanged == unchanged, "\(name): \(result)")
                #expect(result.head?.version == version && result.head?.count == count, "\(name): \(String(describing: result.head))")
            }
            try expect("sets/s0", committed: true, upserted: 1, hidden: 0, unchanged: 1, version: 2, count: 3)
            try expect("sets/s1", committed: true, upserted: 0, hidden: 1, unchanged: 0, version: 2, count: 2)
            try expect("sets/s2", committed: false, upserted: 0, hidden: 0, unchanged: 1, version: 1, count: 3)
            try expect("sets/s3", committed: true, upserted: 1, hidden: 0, unchanged: 0, version: 3, count: 3)
            try expect("sets/s4", committed: true, upserted: 1, hidden: 0, unchanged: 0, version: 2, count: 4)
            try expect("sets/s5", committed: false, upserted: 0, hidden: 0, unchanged: 1, version: 1, count: 3)
            try expect("sets/new", committed: true, upserted: 1, hidden: 0, unchanged: 0, version: 1, count: 1)
            #expect(try await store.changes(after: 1, in: "sets/s1") == [#"{"hidden":true,"id":"q1"}"#])
            #expect(try await store.head(of: "sets/s6")?.version == 1)
            // Replacing: what the input does not name is hidden, in each partition it names only.
            let replacing = #"{"id":"q0","set":"s6","v":0}"# + "\n" + #"{"id":"q2","set":"s7","v":5}"#
            let replaced = try await store.importPartitioned(replacing, collection: "sets", by: "set", replace: true)
            #expect(replaced.map(\.hidden) == [2, 2] && replaced.map(\.upserted) == [0, 1] && replaced.map(\.unchanged) == [1, 0])
            #expect(try await store.export("sets/s7") == #"{"id":"q2","set":"s7","v":5}"# + "\n")
            #expect(try await store.head(of: "sets/s8")?.count == 3)
            for name in ["sets/s0", "sets/s1", "sets/s2", "sets/s3", "sets/s4", "sets/s6", "sets/s7", "sets/new"] {
                let head = try #require(try await store.head(of: name))
                var digest = StateDigest.empty
                var checksum = StateChecksum.empty
                let lines = try await store.export(name).split(separator: "\n")
                for line in lines {
                    let record = try Record(json: Array(line.utf8))
                    digest.add(collection: name, id: record.id, canonical: record.bytes)
                    checksum.add(hash: record.hash)
                }
                #expect(head.count == lines.count && head.checksum == checksum, "\(name)")
                #expect(try await store.store.publishedState(of: [name]).entries.first?.digest == digest.fingerprint, "\(name)")
            }
        } catch {
            await store.stop()
            throw error
        }
        await store.stop()
    }

    @Test func partitionByNeedsACollectionName() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "sets/1", "--partition-by", "set", "-"], stdin: "")
        #expect(result.status == 2 && result.stderr.contains("--partition-by needs --collection NAME"), "\(result.stderr)")
    }

    /// Partitions new to the store go by the set-based path, yet their records' files are
    /// checked and noted as any write's are: a reference to a blob the store does not hold is
    /// refused (nothing committed), and a held one becomes readable through its partition.
    @Test(arguments: TestBackend.allCases) func aNewPartitionsFileReferencesAreCheckedAndNoted(_ backend: TestBackend) async throws {
        try await TestDatabase.with(backend) { store in
            let bytes = AttachmentStoreTests.blob(5_000)
            let reference = try AttachmentStoreTests.reference(bytes)
            func line(_ id: String, set: String) -> String {
                #"{"id":"\#(id)","set":"\#(set)","file":{"$attachment":"\#(reference.sha256)","size":\#(bytes.count),"type":"\#(reference.type)"}}"#
            }
            // Refused at its line (the input's second), whether its partition is new or not.
            await #expect(performing: {
                try await store.importPartitioned(#"{"id":"q0","set":"a"}"# + "\n" + line("q1", set: "a"), collection: "sets", by: "set")
            }, throws: { error in
                (error as? ImportError).map { $0.code == .missingAttachment && $0.line == 2 && $0.source == "test" } ?? false
            })
            #expect(try await store.head(of: "sets/a") == nil)
            try await store.store.storeAttachment(reference, from: AttachmentStoreTests.chunks(bytes))
            let written = try await store.importPartitioned(line("q1", set: "b") + "\n" + #"{"id":"q2","set":"c"}"#, collection: "sets", by: "set")
            #expect(written.map(\.committed) == [true, true])
            #expect(try await store.store.collections(referringTo: reference.sha256, limit: 10) == ["sets/b"])
            #expect(try await store.store.attachment(reference.sha256, in: "sets/b") == reference)
            #expect(try await store.store.attachment(reference.sha256, in: "sets/c") == nil)
            let missing = try AttachmentStoreTests.reference(AttachmentStoreTests.blob(7_000))
            let elsewhere = #"{"id":"q9","set":"c","file":{"$attachment":"\#(missing.sha256)","size":7000,"type":"\#(missing.type)"}}"#
            await #expect(performing: {
                try await store.importPartitioned(#"{"id":"q3","set":"c"}"# + "\n" + #"{"id":"q4","set":"d"}"# + "\n" + elsewhere, collection: "sets", by: "set")
            }, throws: { error in
                (error as? ImportError).map { $0.code == .missingAttachment && $0.line == 3 } ?? false
            })
        }
    }

    /// The same id twice in one partition is refused at its later line, wherever the lines
    /// stand; the same id in two partitions is two records.
    @Test func aRepeatedIdInOnePartitionIsRefusedAtItsLaterLine() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let lines = [#"{"id":"q1","set":"a"}"#, #"{"id":"q1","set":"b"}"#, #"{"id":"q2","set":"a"}"#, #"{"id":"q1","set":"a","again":true}"#]
        let input = try dir.write("in.ndjson", lines.joined(separator: "\n") + "\n")
        let refused = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "sets", "--partition-by", "set", "--quiet", input])
        #expect(refused.status == 1)
        #expect(refused.stderr.hasPrefix("deltasnap: \(input):4: duplicate id \"q1\""), "\(refused.stderr)")
        #expect(try SQLiteDatabase(path: dir.file("s.sqlite")).head(of: "sets/a") == nil)
        let once = try dir.write("once.ndjson", lines.dropLast().joined(separator: "\n") + "\n")
        let result = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "sets", "--partition-by", "set", "--quiet", once])
        #expect(result.status == 0 && result.stdout.hasPrefix("sets: 2 partitions, 2 new versions: 3 upserted, 0 hidden, 0 unchanged"), "\(result.stdout)")
    }

    /// More partitions than one run holds (`PathBatches.maximumPaths`): the store writes
    /// several runs in one transaction (PostgreSQL drops each run's staging tables before the
    /// next makes its own), first all new, then existing and new mixed with `--replace`.
    @Test(arguments: TestBackend.allCases) func manyRunsOfPartitionsAreOneImport(_ backend: TestBackend) async throws {
        try await TestDatabase.with(backend) { store in
            let count = PathBatches.maximumPaths * 2 + 7
            let first = (0..<count).map { #"{"id":"a","set":"p\#($0)","n":\#($0)}"# }.joined(separator: "\n")
            let written = try await store.importPartitioned(first, collection: "sets", by: "set")
            #expect(written.count == count && written.allSatisfy(\.committed))
            let before = try await store.publishedSequence()
            // Every partition named again: odd ones changed, even ones the same; p0 gains a
            // record and loses none; 100 partitions new.
            let second = (0..<(count + 100)).map { #"{"id":"a","set":"p\#($0)","n":\#($0 % 2 == 1 && $0 < count ? -$0 : $0)}"# }
                .joined(separator: "\n") + "\n" + #"{"id":"b","set":"p0"}"#
            let merged = try await store.importPartitioned(second, collection: "sets", by: "set", replace: true)
            #expect(merged.count == count + 100)
            #expect(merged.filter(\.committed).count == count / 2 + 1 + 100)
            #expect(merged.reduce(0) { $0 + $1.unchanged } == count / 2 + 1)
            #expect(try await store.head(of: "sets/p0")?.count == 2)
            #expect(try await store.head(of: "sets/p1")?.version == 2)
            #expect(try await store.head(of: "sets/p2")?.version == 1)
            #expect(try await store.head(of: "sets/p\(count + 99)")?.count == 1)
            #expect(try await store.publishedSequence() > before)
            #expect(try await store.export("sets/p3") == #"{"id":"a","n":-3,"set":"p3"}"# + "\n")
        }
    }
}
