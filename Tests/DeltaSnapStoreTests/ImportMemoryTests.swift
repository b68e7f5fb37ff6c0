import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// An import holds bounded memory whatever the order of its ids (issue 44): past
/// `seenInMemoryLimit` ids the ones put are kept in a temporary table, not a Set. Lowered
/// here to 100 so a small import crosses it; what it does must not change.
@Suite struct ImportMemoryTests {
    /// Records `indices` as NDJSON, in the order given.
    func stream(_ indices: [Int], extra: String = "") -> RecordStream {
        let text = indices.map { #"{"id":"r\#($0)","n":\#($0)}"# }.joined(separator: "\n") + extra
        return RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "test")
    }

    func putAll(_ stream: RecordStream, into writer: CollectionWriter) throws {
        while let record = try stream.next() { try writer.put(record) }
    }

    @Test func aRepeatedIdPastTheLimitIsStillRefusedAndNothingIsCommitted() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        let shuffled = Array(0..<1_000).shuffled()
        #expect(throws: (any Error).self) {
            try store.write(to: "items") { writer in
                writer.seenInMemoryLimit = 100
                try putAll(stream(shuffled, extra: "\n" + #"{"id":"r\#(shuffled[10])","n":-1}"#), into: writer)
            }
        }
        #expect(try store.head(of: "items") == nil, "a refused import committed")
        // The same ids once each: all in, one version.
        let result = try store.write(to: "items") { writer in
            writer.seenInMemoryLimit = 100
            try putAll(stream(shuffled), into: writer)
        }
        #expect(result.upserted == 1_000)
    }

    @Test func aReplacePastTheLimitHidesExactlyTheRecordsNotPut() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        _ = try store.write(to: "items") { try putAll(stream(Array(0..<1_000)), into: $0) }
        let kept = Array(0..<1_000).filter { $0 % 3 != 0 }.shuffled()
        let result = try store.write(to: "items") { writer in
            writer.seenInMemoryLimit = 100
            try putAll(stream(kept), into: writer)
            try writer.hideRecordsNotPut()
        }
        #expect(result.hidden == 334 && result.upserted == 0)
        #expect(try store.head(of: "items")?.count == kept.count)
    }
}
