import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// The store's behaviour, one suite run on each backend (SQLite, and a throwaway PostgreSQL
/// cluster on 127.0.0.1): versions, diffs, hides, replaces, refusals, checksums, compaction.
@Suite struct StoreContractTests {
    func withDatabase(_ backend: TestBackend, configuration: StoreConfiguration = StoreConfiguration(), _ body: (TestDatabase) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(backend, in: dir, configuration: configuration)
        do { try await body(database) } catch {
            await database.stop()
            throw error
        }
        await database.stop()
    }

    /// The checksum and count of what `export` shows, recomputed from scratch.
    func recomputed(_ database: TestDatabase, _ collection: String) async throws -> (StateChecksum, Int) {
        var checksum = StateChecksum.empty
        let lines = try await database.export(collection).split(separator: "\n")
        for line in lines { checksum.add(hash: XXH64.hash(Array(line.utf8))) }
        return (checksum, lines.count)
    }

    @Test(arguments: TestBackend.allCases)
    func oneImportMakesOneVersionAndANoOpReimportMakesNone(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let text = Fixtures.ndjson(0..<100)
            let first = try await database.importText(text, collection: "items")
            #expect(first.committed && first.head?.version == 1 && first.upserted == 100)
            let again = try await database.importText(text, collection: "items")
            #expect(!again.committed && again.unchanged == 100)
            // The same data in another key order and spacing is the same canonical record.
            try await database.importText(#"{ "name" : "x", "id":"k" }"# + "\n", collection: "items")
            #expect(try await !database.importText(#"{"id":"k","name":"x"}"#, collection: "items").committed)
            #expect(try await database.head(of: "items")?.version == 2)
            // An empty first import creates no collection.
            #expect(try await !database.importText("", collection: "empty").committed)
            #expect(try await database.head(of: "empty") == nil)
            #expect(try await database.collections().map(\.name) == ["items"])
        }
    }

    /// Many heads in one read: those that exist, each as `head(of:)` reads it alone.
    @Test(arguments: TestBackend.allCases)
    func manyHeadsReadAtOnceAreEachAsReadAlone(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            _ = try await database.importText(Fixtures.ndjson(0..<3), collection: "items")
            _ = try await database.importPartitioned(#"{"id":"a","u":"alice"}"# + "\n" + #"{"id":"b","u":"bob"}"#, collection: "sets", by: "u")
            let names = ["sets/bob", "missing", "items", "sets/alice", "sets/carol"]
            let many = try await database.store.heads(of: names)
            var alone: [CollectionHead] = []
            for name in names { if let head = try await database.head(of: name) { alone.append(head) } }
            #expect(Set(many.map(\.name)) == ["items", "sets/alice", "sets/bob"])
            #expect(Dictionary(uniqueKeysWithValues: many.map { ($0.name, $0) }) == Dictionary(uniqueKeysWithValues: alone.map { ($0.name, $0) }))
            #expect(try await database.store.heads(of: []).isEmpty)
        }
    }

    /// The index's read: a name whose head is the one the caller knew is confirmed (no entry
    /// made), the others get their entry, as `publishedState(of:)` makes it, in one read.
    @Test(arguments: TestBackend.allCases)
    func publishedStateConfirmsKnownHeadsAndMakesTheRest(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            _ = try await database.importText(Fixtures.ndjson(0..<3), collection: "items")
            _ = try await database.importText(Fixtures.ndjson(0..<2), collection: "notes")
            let names = ["items", "missing", "notes"]
            let all = try await database.store.publishedState(of: names)
            let items = try #require(try await database.head(of: "items"))
            let stale = PublishedHead(epoch: items.epoch, version: items.version - 1, floor: items.floor)
            let notes = try #require(try await database.head(of: "notes"))
            let read = try await database.store.publishedState(of: names, confirming: ["items": PublishedHead(items), "notes": stale, "missing": stale])
            #expect(read.confirmed == ["items"])
            #expect(read.entries == all.entries.filter { $0.collection == "notes" } && read.sequence == all.sequence)
            #expect(read.entries.first?.version == notes.version)
        }
    }

    /// Heads known as of a publication sequence: a name that did not move since is confirmed
    /// (on SQLite without reading its head), one that moved gets its entry, a name the caller
    /// did not know is read — the same answer as reading every head.
    @Test(arguments: TestBackend.allCases)
    func publishedStateStatedAtASequenceConfirmsWhatDidNotMoveSince(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            for name in ["a", "b", "c"] { _ = try await database.importText(Fixtures.ndjson(0..<2), collection: name) }
            let before = try await database.store.publishedState(of: ["a", "b", "c"])
            var known: [String: PublishedHead] = [:]
            for name in ["a", "b"] { known[name] = PublishedHead(try #require(try await database.head(of: name))) }
            _ = try await database.importText(Fixtures.ndjson(5..<6), collection: "b")
            _ = try await database.importText(Fixtures.ndjson(0..<1), collection: "d")
            let names = ["a", "b", "c", "missing"]
            let read = try await database.store.publishedState(of: names, confirming: known, statedAt: before.sequence)
            let all = try await database.store.publishedState(of: names)
            #expect(read.sequence == all.sequence && read.sequence > before.sequence)
            #expect(read.confirmed == ["a"])
            #expect(read.entries == all.entries.filter { $0.collection != "a" }, "b moved, c was not known")
            // Stated at the current sequence, nothing known moved.
            known["b"] = PublishedHead(try #require(try await database.head(of: "b")))
            #expect(try await database.store.publishedState(of: names, confirming: known, statedAt: all.sequence).confirmed == ["a", "b"])
        }
    }

    @Test(arguments: TestBackend.allCases)
    func diffWritesOnlyChangedRecordsAndHidesAndUnhides(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            try await database.importText(#"{"id":"a","v":1}{"id":"b","v":1}{"id":"c","v":1}"#, collection: "c")
            let second = try await database.importText(#"{"id":"a","v":2}{"id":"b","v":1}{"id":"c","hidden":true}{"id":"d","v":1}"#, collection: "c")
            #expect(second.upserted == 2 && second.hidden == 1 && second.unchanged == 1)
            #expect(try await database.changes(after: 1, in: "c").sorted() == [#"{"hidden":true,"id":"c"}"#, #"{"id":"a","v":2}"#, #"{"id":"d","v":1}"#])
            #expect(try await database.export("c") == "{\"id\":\"a\",\"v\":2}\n{\"id\":\"b\",\"v\":1}\n{\"id\":\"d\",\"v\":1}\n")
            // Hiding again, or hiding what never existed, is no change.
            #expect(try await !database.importText(#"{"id":"c","hidden":true}{"id":"zz","hidden":true}"#, collection: "c").committed)
            let unhide = try await database.importText(#"{"id":"c","v":9}"#, collection: "c")
            #expect(unhide.upserted == 1 && unhide.head?.count == 4)
            #expect(try await database.changes(after: 2, in: "c") == [#"{"id":"c","v":9}"#])
        }
    }

    /// `openPage`: the visible records after an id in byte order, at most `limit`, with the
    /// head of their transaction and their number; hidden records are skipped.
    @Test(arguments: TestBackend.allCases)
    func aPageIsTheVisibleRecordsAfterAnIdInByteOrder(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            try await database.importText(#"{"id":"a"}{"id":"B"}{"id":"é"}{"id":"b"}{"id":"c"}{"id":"z"}"#, collection: "p")
            try await database.importText(#"{"id":"b","hidden":true}"#, collection: "p")
            func page(after id: String?, limit: Int) async throws -> (ids: [String], count: Int, version: UInt64) {
                let source = try await database.store.openPage(of: "p", after: id, limit: limit)
                var ids: [String] = []
                while try await source.next({ ids.append(try Record.parse(Array($0)).id) }) {}
                await source.close()
                return (ids, source.count, source.head.version)
            }
            let first = try await page(after: nil, limit: 3)
            #expect(first.ids == ["B", "a", "c"] && first.count == 3 && first.version == 2)
            #expect(try await page(after: "c", limit: 3).ids == ["z", "é"])
            #expect(try await page(after: "a", limit: 1).ids == ["c"])
            let last = try await page(after: "é", limit: 5)
            #expect(last.ids.isEmpty && last.count == 0)
            await #expect(throws: StoreError.self) { _ = try await database.store.openPage(of: "nothing", after: nil, limit: 5) }
        }
    }

    @Test(arguments: TestBackend.allCases)
    func replaceHidesRecordsAbsentFromTheInput(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            try await database.importText(Fixtures.ndjson(0..<25_000), collection: "c")
            let replaced = try await database.importText(Fixtures.ndjson(10..<20), collection: "c", replace: true)
            #expect(replaced.hidden == 24_990 && replaced.upserted == 0 && replaced.unchanged == 10 && replaced.head?.count == 10)
            #expect(try await database.export("c") == Fixtures.ndjson(10..<20))
            #expect(try await recomputed(database, "c").0 == database.head(of: "c")?.checksum)
            // A replace with no record at all is refused: it would hide everything.
            do {
                try await database.importText("", collection: "c", replace: true)
                Issue.record("an empty replace was accepted")
            } catch is ImportError {}
            let head = try await database.head(of: "c")
            #expect(head?.count == 10)
        }
    }

    /// The tombstones a replace writes for the records it did not mention are
    /// `Record.tombstone(id:)`'s bytes whatever the ids hold (PostgreSQL writes them itself).
    @Test(arguments: TestBackend.allCases)
    func aReplacesTombstonesAreCanonicalWhateverTheirIds(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let odd = ["quote\"d", "back\\slash", "tab\tnew\nline\r", "bell\u{07}del\u{7F}", "é/ü 漢字 🙂", "ctl\u{1F}\u{08}\u{0C}"]
            let lines = (odd + ["kept"]).map { id in
                var bytes = Array(#"{"id":"#.utf8)
                CanonicalJSON.writeString(id, into: &bytes)
                bytes += Array(#","v":1}"#.utf8)
                return String(decoding: bytes, as: UTF8.self)
            }
            try await database.importText(lines.joined(separator: "\n"), collection: "c")
            let replaced = try await database.importText(#"{"id":"kept","v":1}"#, collection: "c", replace: true)
            #expect(replaced.hidden == odd.count && replaced.head?.count == 1)
            #expect(try await database.changes(after: 1, in: "c").sorted() == odd.map { Record.tombstone(id: $0).text }.sorted())
            #expect(try await recomputed(database, "c").0 == database.head(of: "c")?.checksum)
        }
    }

    @Test(arguments: TestBackend.allCases)
    func badInputIsRefusedWithItsLineAndNothingIsCommitted(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            for (text, line) in [("{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"a\"}\n", 3), ("{\"id\":\"a\"}\n[1]\n", 2)] {
                do {
                    try await database.importText(text, collection: "c")
                    Issue.record("accepted: \(text)")
                } catch let error as ImportError {
                    #expect(error.line == line && error.source == "test")
                    if line == 3 { #expect(error.reason == StoreError.duplicateID("a").description) }
                }
            }
            let head = try await database.head(of: "c")
            #expect(head == nil)
        }
    }

    @Test(arguments: TestBackend.allCases)
    func incrementalChecksumEqualsARecomputationAfterRandomImports(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            var random = SplitMix64(seed: 7)
            let generator = SyntheticRecords(seed: 3)
            for round in 0..<30 {
                var lines: [String] = []
                var ids = Set<Int>()
                for _ in 0..<Int(random.next() % 40) {
                    let index = Int(random.next() % 60)
                    guard ids.insert(index).inserted else { continue }
                    if random.next() % 4 == 0 {
                        lines.append(#"{"id":"\#(SyntheticRecords.id(index))","hidden":true}"#)
                    } else {
                        lines.append(String(decoding: generator.json(index: index, revision: Int(random.next() % 3)), as: UTF8.self))
                    }
                }
                let replace = round % 7 == 6 && !lines.isEmpty
                _ = try await database.importText(lines.joined(separator: "\n"), collection: "c", replace: replace)
                if let head = try await database.head(of: "c") {
                    let (checksum, count) = try await recomputed(database, "c")
                    #expect(checksum == head.checksum && count == head.count, "round \(round)")
                }
            }
        }
    }

    @Test(arguments: TestBackend.allCases)
    func compactionRaisesTheFloorAndDropsOldTombstones(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            try await database.importText(#"{"id":"a"}{"id":"b"}"#, collection: "c")
            try await database.importText(#"{"id":"a","hidden":true}"#, collection: "c")
            try await database.importText(#"{"id":"c"}"#, collection: "c")
            let sequence = try await database.publishedSequence()
            #expect(try await database.compact("c", throughVersion: 2) == 1)
            let head = try #require(try await database.head(of: "c"))
            #expect(head.floor == 2 && head.version == 3 && head.count == 2)
            #expect(try await database.changes(after: 0, in: "c").count == 2)
            // A raised floor is published under a new sequence (docs/PROTOCOL.md §8.1); a
            // compaction that raises nothing changes nothing.
            let raised = try await database.publishedSequence()
            #expect(raised > sequence)
            _ = try await database.compact("c", throughVersion: 2)
            #expect(try await database.publishedSequence() == raised)
        }
    }

    @Test(arguments: TestBackend.allCases)
    func aPinnedConfigurationPinsEpochAndCommitTime(_ backend: TestBackend) async throws {
        let configuration = StoreConfiguration(epochForNewCollections: "00000000000000a1", fixedCommitTime: 1_700_000_000)
        try await withDatabase(backend, configuration: configuration) { database in
            let result = try await database.importText(#"{"id":"a"}"#, collection: "c")
            #expect(result.token?.description == "00000000000000a1.1")
            #expect(result.head?.lastModified == "Tue, 14 Nov 2023 22:13:20 GMT")
        }
    }
}

/// Conflict copies (issue 21): a collection merged by `fork`, on both stores.
extension StoreContractTests {
    func push(_ database: TestDatabase, _ body: String, merge: MergePolicy = .fork) async throws -> [MutationResult.Status] {
        let (client, mutations) = try PushRequest.parse(Array(body.utf8))
        return try await database.store.push(mutations, from: client, user: nil, to: "notes", retention: PushRetention(), merge: merge)
            .response.results.map(\.status)
    }

    /// Imports note n1 (version 1) and returns its token, the base of the writes that follow.
    func seedNote(_ database: TestDatabase) async throws -> String {
        try await database.importText(#"{"id":"n1","title":"a"}"#, collection: "notes")
        return try #require(try await database.head(of: "notes")).token.description
    }

    static func write(_ client: String, seq: Int, base: String?, op: String = "patch", title: String) -> String {
        let baseMember = base.map { #""base":"\#($0)","# } ?? ""
        return #"{"client":"\#(client)","mutations":[{\#(baseMember)"id":"n1","op":"\#(op)","seq":\#(seq),"value":{"title":"\#(title)"}}]}"#
    }

    @Test(arguments: TestBackend.allCases)
    func aForkedCollectionCopiesAWriteWhoseRecordChangedSinceItsBase(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let base = try await seedNote(database)
            // Nothing changed since the phone's base: merged as usual.
            #expect(try await push(database, Self.write("phone", seq: 1, base: base, title: "phone")) == [.applied(version: 2)])
            // The laptop edited the same state: the record changed since (the phone) — a copy.
            let copy = ConflictCopy.id(of: "n1", client: "laptop", seq: 1)
            let laptop = Self.write("laptop", seq: 1, base: base, title: "laptop")
            #expect(try await push(database, laptop) == [.copied(version: 3, copy: copy)])
            var export = try await database.export("notes")
            #expect(export == #"{"id":"n1","title":"phone"}"# + "\n" + #"{"conflictOf":"n1","id":"\#(copy)","title":"laptop"}"# + "\n")
            // A retried batch gets the same answer from the ledger, and writes nothing.
            #expect(try await push(database, laptop) == [.copied(version: 3, copy: copy)])
            #expect(try await database.head(of: "notes")?.version == 3)
            // The phone's next write from its old base: the change since is its own — merged.
            #expect(try await push(database, Self.write("phone", seq: 2, base: base, title: "phone 2")) == [.applied(version: 4)])
            // No base, a base of another epoch, a delete, or a collection merged by fields: merged.
            #expect(try await push(database, Self.write("tablet", seq: 1, base: nil, title: "no base")) == [.applied(version: 5)])
            #expect(try await push(database, Self.write("tablet", seq: 2, base: "0000000000000000.1", title: "other epoch")) == [.applied(version: 6)])
            #expect(try await push(database, Self.write("watch", seq: 1, base: base, title: "fields"), merge: .fields) == [.applied(version: 7)])
            export = try await database.export("notes")
            #expect(export.hasPrefix(#"{"id":"n1","title":"fields"}"#), "\(export)")
            #expect(try await push(database, #"{"client":"watch","mutations":[{"base":"\#(base)","id":"n1","op":"delete","seq":2}]}"#) == [.applied(version: 8)])
            // A base that is not a string refuses that write alone.
            guard case .refused(let refusal)? = try await push(database, #"{"client":"watch","mutations":[{"base":7,"id":"n2","op":"put","seq":3,"value":{}}]}"#).first else {
                Issue.record("a numeric base was not refused"); return
            }
            #expect(refusal.code == "invalid_mutation")
        }
    }

    /// A batch that changed nothing names the head in its results — a version another
    /// client committed — which must not pass for this client's own change.
    @Test(arguments: TestBackend.allCases)
    func aBatchThatChangedNothingDoesNotMakeTheHeadItsOwn(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let base = try await seedNote(database)
            #expect(try await push(database, Self.write("other", seq: 1, base: base, title: "other")) == [.applied(version: 2)])
            // The tablet deletes what is not there: nothing committed, the result names version 2.
            #expect(try await push(database, #"{"client":"tablet","mutations":[{"id":"ghost","op":"delete","seq":1}]}"#) == [.applied(version: 2)])
            let copy = ConflictCopy.id(of: "n1", client: "tablet", seq: 2)
            #expect(try await push(database, Self.write("tablet", seq: 2, base: base, title: "tablet")) == [.copied(version: 3, copy: copy)])
        }
    }
}

extension StoreContractTests {
    @Test(arguments: TestBackend.allCases)
    func sourceTransactionsAreOneVersionEachAndTheirPositionIsCommittedWithThem(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let store = database.store
            func record(_ json: String) throws -> Record { try Record(json: Array(json.utf8)) }
            func position(_ text: String) -> SourcePosition { SourcePosition(follower: "pg:slot", position: text) }
            let results = try await store.importTransactions([
                StoreTransaction(partitions: [PartitionRecords(path: "items", records: [try record(#"{"id":"a","v":1}"#)])], position: position("1")),
                StoreTransaction(partitions: [
                    PartitionRecords(path: "items", records: [try record(#"{"id":"b","v":1}"#)]),
                    PartitionRecords(path: "scores/alice", records: [try record(#"{"id":"s","v":1}"#)]),
                ], position: position("2")),
                StoreTransaction(partitions: [PartitionRecords(path: "items", records: [try record(#"{"id":"a","v":2}"#), .tombstone(id: "b")])], position: position("3")),
            ])
            // A path named by three transactions has three versions, in their order.
            #expect(results.map { $0.map { $0.head?.version ?? 0 } } == [[1], [2, 1], [3]])
            #expect(try await database.export("items") == #"{"id":"a","v":2}"# + "\n")
            #expect(try await database.changes(after: 2, in: "items") == [#"{"id":"a","v":2}"#, #"{"hidden":true,"id":"b"}"#])
            #expect(try await store.sourcePosition(of: "pg:slot") == "3")
            // Every path held now (PostgreSQL merges such a batch set-based): the same rule.
            let many = (0..<50).map { index in
                StoreTransaction(partitions: [
                    PartitionRecords(path: "items", records: [try! record(#"{"id":"k\#(index % 7)","v":\#(index)}"#), .tombstone(id: "k\((index + 3) % 7)")]),
                    PartitionRecords(path: "scores/alice", records: index % 10 == 0 ? [try! record(#"{"id":"s","v":\#(index)}"#)] : []),
                ], position: position("m\(index)"))
            }
            let merged = try await store.importTransactions(many)
            #expect(merged.count == 50 && merged[49][0].head?.version == 53 && merged[49][0].committed)
            #expect(merged.map { $0[1].committed } == (0..<50).map { $0 % 10 == 0 })
            #expect(try await store.sourcePosition(of: "pg:slot") == "m49")
            // One version per transaction: the changes since version 50 are those of 51–53.
            var expected: [String: String] = [:]
            for index in 47..<50 {
                expected["k\(index % 7)"] = #"{"id":"k\#(index % 7)","v":\#(index)}"#
                expected["k\((index + 3) % 7)"] = #"{"hidden":true,"id":"k\#((index + 3) % 7)"}"#
            }
            #expect(Set(try await database.changes(after: 50, in: "items")).isSuperset(of: Set(expected.values.filter { $0.contains("hidden") == false })))
            let (checksum, count) = try await recomputed(database, "items")
            let head = try #require(try await store.head(of: "items"))
            #expect(head.checksum == checksum && head.count == count)
            var digest = StateDigest.empty
            for line in try await database.export("items").split(separator: "\n") {
                let parsed = try Record.parse(Array(line.utf8))
                digest.add(collection: "items", id: parsed.id, canonical: parsed.bytes)
            }
            #expect(try await store.publishedState(of: ["items"]).entries.first?.digest == digest.fingerprint)
            #expect(try await store.partitions(of: "scores") == ["scores/alice"])
            #expect(try await store.partitions(of: "score").isEmpty)
            // A position with nothing to write is recorded all the same; then forgotten.
            _ = try await store.importPartitions([], replace: false, recording: position("4"))
            #expect(try await store.sourcePosition(of: "pg:slot") == "4")
            #expect(try await store.forgetSourcePosition(of: "pg:slot"))
            #expect(try await store.sourcePosition(of: "pg:slot") == nil)
            #expect(try await !store.forgetSourcePosition(of: "pg:slot"))
        }
    }
}

extension StoreContractTests {
    /// Paths streamed one after the other into one transaction: one version each, the position
    /// with them; in ascending-id mode a replace hides what lies between the given ids and a
    /// repeated id is refused with nothing committed; checksum, count and digest as recomputed.
    @Test(arguments: TestBackend.allCases)
    func streamedPathsAreOneTransactionAndAscendingIdsNeedNoMemory(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let store = database.store
            try await database.importText((0..<10).map { #"{"id":"k\#($0)","v":0}"# }.joined(separator: "\n"), collection: "items")
            /// `next` for `importStreams`: each path's NDJSON, in order.
            func streams(_ parts: [(String, [String], ascending: Bool)]) -> @Sendable () throws -> PathRecords? {
                let remaining = Locked(parts)
                return {
                    try remaining.withLock { parts in
                        guard !parts.isEmpty else { return nil }
                        let (path, lines, ascending) = parts.removeFirst()
                        let stream = RecordStream(source: ChunkSources.bytes(Array(lines.map { $0 + "\n" }.joined().utf8)), name: path)
                        stream.idsAscend = ascending
                        stream.emptyIsIntended = lines.isEmpty
                        return PathRecords(path: path, records: stream)
                    }
                }
            }
            let position = SourcePosition(follower: "pg:slot", position: "s1")
            // Replace, ascending: k0 changes, k1–k4 and k6–k9 are left out (hidden), k5 kept as it was.
            let replaced = try await store.importStreams(streams([
                ("items", [#"{"id":"k0","v":1}"#, #"{"id":"k5","v":0}"#], ascending: true),
                ("scores/alice", [#"{"id":"a","v":1}"#, #"{"id":"b","v":1}"#], ascending: true),
                ("scores/bob", [], ascending: true),
            ]), replace: true, recording: position)
            #expect(replaced.map(\.committed) == [true, true, false])
            #expect(try await database.export("items") == #"{"id":"k0","v":1}"# + "\n" + #"{"id":"k5","v":0}"# + "\n")
            #expect(try await store.head(of: "items")?.version == 2)
            #expect(try await store.sourcePosition(of: "pg:slot") == "s1")
            // Not replacing, in any order: a row changed, one hidden, nothing else touched.
            let merged = try await store.importStreams(streams([
                ("items", [#"{"id":"k9","v":9}"#, #"{"hidden":true,"id":"k0"}"#], ascending: false),
            ]), replace: false, recording: SourcePosition(follower: "pg:slot", position: "s2"))
            #expect(merged.first?.head?.version == 3)
            #expect(try await database.export("items") == #"{"id":"k5","v":0}"# + "\n" + #"{"id":"k9","v":9}"# + "\n")
            // A repeated id in ascending mode: refused, and nothing of the transaction stays.
            await #expect(throws: (any Error).self) {
                try await store.importStreams(streams([
                    ("scores/carol", [#"{"id":"x","v":1}"#], ascending: true),
                    ("items", [#"{"id":"k1","v":1}"#, #"{"id":"k1","v":2}"#], ascending: true),
                ]), replace: false, recording: SourcePosition(follower: "pg:slot", position: "s3"))
            }
            #expect(try await store.head(of: "scores/carol") == nil)
            #expect(try await store.head(of: "items")?.version == 3)
            #expect(try await store.sourcePosition(of: "pg:slot") == "s2")
            for path in ["items", "scores/alice"] {
                let (checksum, count) = try await recomputed(database, path)
                let head = try #require(try await store.head(of: path))
                #expect(head.checksum == checksum && head.count == count, "\(path)")
                var digest = StateDigest.empty
                for line in try await database.export(path).split(separator: "\n") {
                    let parsed = try Record.parse(Array(line.utf8))
                    digest.add(collection: path, id: parsed.id, canonical: parsed.bytes)
                }
                #expect(try await store.publishedState(of: [path]).entries.first?.digest == digest.fingerprint, "\(path)")
            }
        }
    }
}

/// The one write primitive (`StoreWriter.commit`): steps of every kind in one transaction.
extension StoreContractTests {
    /// Two collections' imports, two pushes, held and streamed paths and a position commit
    /// together, each step's outcome told with its index; the same write with a bad record in
    /// its last step commits nothing — not the paths, not the pushes' ledgers, not the position.
    @Test(arguments: TestBackend.allCases)
    func oneWriteOfEveryKindOfStepCommitsTogetherOrNotAtAll(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let store = database.store
            func stream(_ text: String, _ name: String) -> RecordStream {
                RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: name)
            }
            func pushBatch(_ body: String, to collection: String) throws -> PushBatch {
                let (client, mutations) = try PushRequest.parse(Array(body.utf8))
                return PushBatch(mutations, from: client, to: collection)
            }
            func streamed(_ path: String, _ text: String) -> @Sendable () throws -> PathRecords? {
                let given = Locked(false)
                return {
                    try given.withLock { given in
                        defer { given = true }
                        return given ? nil : PathRecords(path: path, records: RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: path))
                    }
                }
            }
            func write(last lastLine: String, position: String) throws -> StoreWrite {
                StoreWrite([
                    .paths([PartitionRecords(path: "scores/alice", records: [try Record(json: Array(#"{"id":"s","v":1}"#.utf8))])], replace: false),
                    .records(stream(Fixtures.ndjson(0..<3), "items"), into: "items", replace: false, progress: nil),
                    .push(try pushBatch(#"{"client":"phone","mutations":[{"id":"n1","op":"insert","seq":1,"value":{"t":"a"}}]}"#, to: "notes")),
                    .push(try pushBatch(#"{"client":"phone","mutations":[{"id":"m1","op":"insert","seq":1,"value":{"t":"b"}}]}"#, to: "memos")),
                    .streamedPaths(streamed("scores/bob", #"{"id":"s","v":2}"#), replace: false),
                    .records(stream(#"{"id":"x"}"# + "\n" + lastLine, "more"), into: "more", replace: false, progress: nil),
                ], recording: SourcePosition(follower: "tool", position: position))
            }

            await #expect(throws: ImportError.self) { try await store.commit(try write(last: #"{"no id":1}"#, position: "bad")) }
            for path in ["scores/alice", "items", "notes", "memos", "scores/bob", "more"] { #expect(try await store.head(of: path) == nil, "\(path)") }
            #expect(try await store.sourcePosition(of: "tool") == nil)

            let outcomes = try await store.commit(try write(last: #"{"id":"y"}"#, position: "good"))
            var steps: [Int] = []
            for outcome in outcomes {
                switch outcome {
                case .written(let step, let result):
                    steps.append(step)
                    #expect(result.committed && result.head?.version == 1, "\(result.collection)")
                case .pushed(let step, let pushed):
                    steps.append(step)
                    #expect(pushed.response.committed && pushed.response.lastSeq == 1)
                }
            }
            #expect(steps == [0, 1, 2, 3, 4, 5])
            #expect(try await database.export("more") == #"{"id":"x"}"# + "\n" + #"{"id":"y"}"# + "\n")
            #expect(try await database.export("memos") == #"{"id":"m1","t":"b"}"# + "\n")
            #expect(try await store.head(of: "items")?.count == 3)
            #expect(try await store.sourcePosition(of: "tool") == "good")
            // The pushes' ledgers were committed with them: the same writes again are not applied twice.
            let again = try await store.push(
                try pushBatch(#"{"client":"phone","mutations":[{"id":"n1","op":"insert","seq":1,"value":{"t":"a"}}]}"#, to: "notes").mutations,
                from: "phone", user: nil, to: "notes", retention: PushRetention(), merge: .fields)
            #expect(!again.response.committed)
            #expect(try await store.head(of: "notes")?.version == 1)
        }
    }
}

extension StoreContractTests {
    /// An expected version writes nothing itself: met, the write commits; missed (the path
    /// moved since it was read), the whole write is refused `busy` and nothing of it stays.
    @Test(arguments: TestBackend.allCases)
    func anExpectedVersionRefusesTheWholeWriteWhenThePathMoved(_ backend: TestBackend) async throws {
        try await withDatabase(backend) { database in
            let store = database.store
            try await database.importText(#"{"id":"a"}"#, collection: "items")
            func write(expecting version: UInt64?) throws -> StoreWrite {
                StoreWrite([
                    .expect("items", atVersion: version),
                    .paths([PartitionRecords(path: "log", records: [try Record(json: Array(#"{"id":"entry"}"#.utf8))])], replace: false),
                ], recording: SourcePosition(follower: "tool", position: "p\(version ?? 0)"))
            }
            let error = await #expect(throws: StoreError.self) { try await store.commit(try write(expecting: 2)) }
            #expect(error?.code == .busy && "\(error!)".contains("version 1, not 2"), "\(String(describing: error))")
            await #expect(throws: StoreError.self) { try await store.commit(try write(expecting: nil)) }
            #expect(try await store.head(of: "log") == nil)
            #expect(try await store.sourcePosition(of: "tool") == nil)
            let outcomes = try await store.commit(try write(expecting: 1))
            #expect(outcomes.count == 1)
            #expect(try await store.head(of: "log")?.version == 1)
            #expect(try await store.sourcePosition(of: "tool") == "p1")
            // A path that does not exist is expected at no version.
            _ = try await store.commit(StoreWrite([.expect("nothing", atVersion: nil)]))
        }
    }
}
