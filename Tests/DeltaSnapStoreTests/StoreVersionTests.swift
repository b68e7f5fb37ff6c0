import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import Foundation
import Testing

@Suite struct StoreVersionTests {
    @Test func oneImportMakesOneVersionAndANoOpReimportMakesNone() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Store(path: dir.file("s.sqlite"))
        let text = Fixtures.ndjson(0..<100)
        let first = try Fixtures.importText(text, into: store, collection: "items")
        #expect(first.committed && first.head?.version == 1 && first.upserted == 100)
        let again = try Fixtures.importText(text, into: store, collection: "items")
        #expect(!again.committed && again.unchanged == 100)
        #expect(try store.head(of: "items")?.version == 1)
        // Same data in another key order and spacing is the same canonical record.
        let reordered = #"{ "name" : "x", "id":"k" }"# + "\n"
        try Fixtures.importText(reordered, into: store, collection: "items")
        let unchanged = try Fixtures.importText(#"{"id":"k","name":"x"}"#, into: store, collection: "items")
        #expect(!unchanged.committed)
        #expect(try store.head(of: "items")?.version == 2)
    }

    @Test func anEmptyFirstImportCreatesNoCollection() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Store(path: dir.file("s.sqlite"))
        let result = try Fixtures.importText("", into: store, collection: "empty")
        #expect(!result.committed)
        #expect(try store.head(of: "empty") == nil)
        #expect(try store.collections().isEmpty)
    }

    @Test func diffWritesOnlyChangedRecordsAndHidesAndUnhides() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Store(path: dir.file("s.sqlite"))
        try Fixtures.importText(#"{"id":"a","v":1}{"id":"b","v":1}{"id":"c","v":1}"#, into: store, collection: "c")
        // Changed a, unchanged b, hidden c, new d.
        let second = try Fixtures.importText(#"{"id":"a","v":2}{"id":"b","v":1}{"id":"c","hidden":true}{"id":"d","v":1}"#, into: store, collection: "c")
        #expect(second.upserted == 2 && second.hidden == 1 && second.unchanged == 1)
        let changes = try store.read { reader -> [String] in
            var out: [String] = []
            try reader.forEachChange(in: "c", after: 1) { out.append(String(decoding: $0, as: UTF8.self)) }
            return out.sorted()
        }
        #expect(changes == [#"{"hidden":true,"id":"c"}"#, #"{"id":"a","v":2}"#, #"{"id":"d","v":1}"#])
        #expect(try Fixtures.export(store, "c") == "{\"id\":\"a\",\"v\":2}\n{\"id\":\"b\",\"v\":1}\n{\"id\":\"d\",\"v\":1}\n")
        // Hiding again, or hiding what never existed, is no change.
        #expect(try !Fixtures.importText(#"{"id":"c","hidden":true}{"id":"zz","hidden":true}"#, into: store, collection: "c").committed)
        // Un-hiding sends the record again.
        let unhide = try Fixtures.importText(#"{"id":"c","v":9}"#, into: store, collection: "c")
        #expect(unhide.upserted == 1 && unhide.head?.count == 4)
        #expect(try store.read { try $0.changeCount(in: "c", after: 2) } == 1)
    }

    @Test func replaceHidesRecordsAbsentFromTheInput() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Store(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<25_000), into: store, collection: "c")
        let replaced = try Fixtures.importText(Fixtures.ndjson(10..<20), into: store, collection: "c", replace: true)
        #expect(replaced.hidden == 24_990 && replaced.upserted == 0 && replaced.head?.count == 10)
        let exported = try Fixtures.export(store, "c")
        #expect(exported == Fixtures.ndjson(10..<20))
        #expect(try store.read { try $0.recomputedChecksum(of: "c") }.checksum == store.head(of: "c")?.checksum)
    }

    @Test func duplicateIDsAreRejectedAndNothingIsCommitted() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Store(path: dir.file("s.sqlite"))
        #expect(throws: ImportError(source: "test", line: 3, reason: StoreError.duplicateID("a").description)) {
            try Fixtures.importText("{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"a\"}\n", into: store, collection: "c")
        }
        #expect(try store.head(of: "c") == nil)
    }

    @Test func incrementalChecksumEqualsARecomputationAfterRandomImports() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Store(path: dir.file("s.sqlite"))
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
            try Fixtures.importText(lines.joined(separator: "\n"), into: store, collection: "c", replace: round % 7 == 6)
            if let head = try store.head(of: "c") {
                let recomputed = try store.read { try $0.recomputedChecksum(of: "c") }
                #expect(recomputed.checksum == head.checksum)
                #expect(recomputed.count == head.count)
            }
        }
    }

    @Test func compactionRaisesTheFloorAndDropsOldTombstones() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Store(path: dir.file("s.sqlite"))
        try Fixtures.importText(#"{"id":"a"}{"id":"b"}"#, into: store, collection: "c")
        try Fixtures.importText(#"{"id":"a","hidden":true}"#, into: store, collection: "c")
        try Fixtures.importText(#"{"id":"c"}"#, into: store, collection: "c")
        #expect(try store.compact("c", throughVersion: 2) == 1)
        let head = try #require(try store.head(of: "c"))
        #expect(head.floor == 2 && head.version == 3 && head.count == 2)
    }

    @Test func reproducibleConfigurationPinsEpochAndCommitTime() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let configuration = StoreConfiguration(epochForNewCollections: "00000000000000a1", fixedCommitTime: 1_700_000_000)
        let store = try Store(path: dir.file("s.sqlite"), configuration: configuration)
        let result = try Fixtures.importText(#"{"id":"a"}"#, into: store, collection: "c")
        #expect(result.token?.description == "00000000000000a1.1")
        #expect(result.head?.lastModified == "Tue, 14 Nov 2023 22:13:20 GMT")
        #expect(throws: StoreError.invalidEpoch("XYZ")) {
            _ = try Store(path: dir.file("t.sqlite"), configuration: StoreConfiguration(epochForNewCollections: "XYZ"))
        }
    }
}
