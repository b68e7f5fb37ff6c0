import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// `import` sorts its input by id in bounded runs spilled to disk, then merges them (issue
/// 44: shuffled ids on a B-tree beyond the page cache made 10M records cost 2.1× per record).
/// The budget is lowered here so a few hundred records make many runs, and the fan-in so the
/// runs are merged in more than one level.
@Suite struct RecordSorterTests {
    /// Records named by `indices` as NDJSON, one per line, in the order given (line n holds indices[n-1]).
    func stream(_ indices: [Int], extra: String = "", hidden: Set<Int> = []) -> RecordStream {
        let text = indices.map { hidden.contains($0) ? #"{"id":"r\#($0)","hidden":true}"# : #"{"id":"r\#($0)","n":\#($0),"pad":"\#(String(repeating: "x", count: $0 % 40))"}"# }
            .joined(separator: "\n") + extra
        return RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "in.ndjson")
    }

    func drain(_ stream: RecordStream) throws -> [(record: Record, line: Int)] {
        var out: [(Record, Int)] = []
        while let record = try stream.next() { out.append((record, stream.line)) }
        return out
    }

    @Test(arguments: [(1 << 20, 64), (2_000, 64), (2_000, 2)])
    func everyRecordComesOutOnceInIdOrderWithItsLine(budget: Int, fanIn: Int) throws {
        let shuffled = Array(0..<3_000).shuffled()
        let hidden: Set<Int> = [5, 77, 2_999]
        let original = try drain(stream(shuffled, hidden: hidden))
        let sorted = try RecordSorter.sorted(stream(shuffled, hidden: hidden), memoryBudget: budget, maximumFanIn: fanIn)
        #expect(sorted.idsAscend)
        let out = try drain(sorted)
        #expect(sorted.count == 3_000)
        #expect(out.map(\.record.id) == original.map(\.record.id).sorted { $0.utf8Precedes($1) })
        // The same canonical bytes, hidden records still hidden, each with the line it came from.
        let byID = Dictionary(uniqueKeysWithValues: original.map { ($0.record.id, $0) })
        for (record, line) in out {
            #expect(byID[record.id]?.record == record)
            #expect(byID[record.id]?.line == line)
        }
        #expect(out.filter(\.record.isHidden).count == 3)
    }

    @Test func aRepeatComesOutTwiceInARowEarlierLineFirst() throws {
        var indices = Array(0..<500).shuffled()
        indices.append(indices[3])  // line 501 repeats line 4
        let out = try drain(RecordSorter.sorted(stream(indices), memoryBudget: 1_000, maximumFanIn: 3))
        let repeated = out.enumerated().filter { $0.element.record.id == "r\(indices[3])" }
        #expect(repeated.map(\.element.line) == [4, 501])
        #expect(repeated.count == 2 && repeated[1].offset == repeated[0].offset + 1)
    }

    @Test func aBadLineIsReportedWhileReadingBeforeAnythingIsWritten() throws {
        let records = stream(Array(0..<400).shuffled(), extra: "\n{\"id\": oops}")
        #expect {
            _ = try RecordSorter.sorted(records, memoryBudget: 1_000, maximumFanIn: 4)
        } throws: { ($0 as? ImportError)?.line == 401 }
    }

    /// Through a real store: a shuffled, spilled import commits what a sorted one does (the
    /// same token and checksum), refuses a repeat at its later line with nothing committed,
    /// and a replacing one hides exactly what it leaves out.
    @Test func aSortedImportCommitsWhatTheInputSaysInAnyOrder() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let inOrder = try SQLiteDatabase(path: dir.file("a.sqlite"))
        let shuffledStore = try SQLiteDatabase(path: dir.file("b.sqlite"))
        let ids = Array(0..<2_000)
        let a = try Importer(store: inOrder, collection: "items").run(stream: stream(ids))
        let b = try Importer(store: shuffledStore, collection: "items")
            .run(stream: RecordSorter.sorted(stream(ids.shuffled()), memoryBudget: 8_000, maximumFanIn: 4))
        #expect(a.upserted == 2_000 && b.upserted == 2_000)
        #expect(try inOrder.head(of: "items")?.checksum == shuffledStore.head(of: "items")?.checksum)

        var repeated = ids.shuffled()
        repeated.insert(repeated[0], at: 1_500)  // line 1501 repeats line 1
        let before = try shuffledStore.head(of: "items")
        #expect {
            _ = try Importer(store: shuffledStore, collection: "items")
                .run(stream: RecordSorter.sorted(stream(repeated), memoryBudget: 8_000, maximumFanIn: 4))
        } throws: { error in
            let failure = error as? ImportError
            return failure?.line == 1_501 && failure?.reason.contains("duplicate id") == true
        }
        #expect(try shuffledStore.head(of: "items") == before)

        let kept = ids.filter { $0 % 3 != 0 }
        let replaced = try Importer(store: shuffledStore, collection: "items", replace: true)
            .run(stream: RecordSorter.sorted(stream(kept.shuffled()), memoryBudget: 8_000, maximumFanIn: 4))
        #expect(replaced.hidden == 667 && replaced.upserted == 0)
        #expect(try shuffledStore.head(of: "items")?.count == kept.count)
    }
}
