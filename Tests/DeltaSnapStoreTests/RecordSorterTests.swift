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

    // MARK: - Grouped (import --partition-by)

    /// Records `q<i>` spread over partitions `sets/s<i % groups>`, shuffled; line n holds order[n-1].
    func partitioned(_ order: [Int], groups: Int, extra: String = "") -> RecordStream {
        let text = order.map { #"{"id":"q\#($0)","set":"s\#($0 % groups)","pad":"\#(String(repeating: "y", count: $0 % 50))"}"# }
            .joined(separator: "\n") + extra
        return RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "in.ndjson")
    }

    func drainGroups(_ next: () throws -> PathRecords?) throws -> [(path: String, records: [(record: Record, line: Int)])] {
        var groups: [(String, [(Record, Int)])] = []
        while let part = try next() {
            #expect(part.records.idsAscend)
            groups.append((part.path, try drain(part.records)))
        }
        return groups
    }

    @Test(arguments: [(1 << 20, 64), (3_000, 64), (3_000, 2)])
    func groupsComeOutInPathOrderEachInIdOrderWithItsLines(budget: Int, fanIn: Int) throws {
        let order = Array(0..<2_000).shuffled()
        let lineOf = Dictionary(uniqueKeysWithValues: order.enumerated().map { ("q\($0.element)", $0.offset + 1) })
        let stream = partitioned(order, groups: 37)
        let next = try RecordSorter.grouped(stream, memoryBudget: budget, maximumFanIn: fanIn) { record in
            "sets/s" + String(Int(record.id.dropFirst())! % 37)
        }
        let groups = try drainGroups(next)
        #expect(groups.map(\.path) == (0..<37).map { "sets/s\($0)" }.sorted { $0.utf8Precedes($1) })
        for (path, records) in groups {
            let ids = records.map(\.record.id)
            #expect(ids == ids.sorted { $0.utf8Precedes($1) }, "\(path)")
            #expect(records.allSatisfy { "sets/s" + String(Int($0.record.id.dropFirst())! % 37) == path })
            #expect(records.allSatisfy { lineOf[$0.record.id] == $0.line })
        }
        #expect(groups.reduce(0) { $0 + $1.records.count } == 2_000)
    }

    @Test func aRepeatWithinAGroupIsRefusedAtItsLaterLineAndTheSameIdElsewhereIsNot() throws {
        // Line 401 repeats line 4's record in the same partition; q0 is also in another partition.
        var order = Array(0..<400).shuffled()
        order.append(order[3])
        let text = order.map { #"{"id":"q\#($0)","set":"s\#($0 % 5)"}"# }.joined(separator: "\n")
            + "\n" + #"{"id":"q0","set":"elsewhere"}"#
        let stream = RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "in.ndjson")
        let next = try RecordSorter.grouped(stream, memoryBudget: 2_000, maximumFanIn: 3) { record in
            try PartitionRecordsKey.of(record, in: stream)
        }
        #expect {
            _ = try drainGroups(next)
        } throws: { error in
            let failure = error as? ImportError
            return failure?.line == 401 && failure?.code == .duplicateID && failure?.source == "in.ndjson"
        }
        let clean = (0..<400).map { #"{"id":"q\#($0)","set":"s\#($0 % 5)"}"# }.joined(separator: "\n") + "\n" + #"{"id":"q0","set":"elsewhere"}"#
        let cleanStream = RecordStream(source: ChunkSources.bytes(Array(clean.utf8)), name: "in.ndjson")
        let groups = try drainGroups(try RecordSorter.grouped(cleanStream, memoryBudget: 2_000, maximumFanIn: 3) { record in
            try PartitionRecordsKey.of(record, in: cleanStream)
        })
        #expect(groups.first?.path == "elsewhere" && groups.first?.records.map(\.record.id) == ["q0"])
        #expect(groups.count == 6)
    }

    @Test func aGroupLeftUnreadIsSkipped() throws {
        let stream = partitioned(Array(0..<300).shuffled(), groups: 3)
        let next = try RecordSorter.grouped(stream, memoryBudget: 1_500, maximumFanIn: 4) { record in
            "g" + String(Int(record.id.dropFirst())! % 3)
        }
        let first = try next()
        #expect(first?.path == "g0")
        _ = try first?.records.next()
        let second = try next()
        #expect(second?.path == "g1")
        #expect(try drain(second!.records).count == 100)
        #expect(try next()?.path == "g2")
        #expect(try next() == nil)
    }

    // MARK: - PathBatches

    /// Paths `p0…` with `sizes[i]` records each, streamed as a store gets them.
    func paths(_ sizes: [Int]) -> () throws -> PathRecords? {
        var index = 0
        return {
            guard index < sizes.count else { return nil }
            defer { index += 1 }
            let text = (0..<sizes[index]).map { #"{"id":"r\#(String(format: "%05d", $0))","v":"\#(String(repeating: "z", count: 80))"}"# }.joined(separator: "\n")
            let records = RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "p\(index)")
            records.idsAscend = true
            return PathRecords(path: "p\(index)", records: records)
        }
    }

    @Test func smallPathsAreHeldTogetherUnderTheBudgetAndLargeOnesStreamedWhole() throws {
        // ~170 bytes a record as counted: 10 records are a small path (under 2,000 bytes), 100
        // are not; a run is handed over once it reaches 4,000 bytes (three small paths).
        var batches = PathBatches(paths([10, 10, 100, 10, 0, 10, 10, 10, 10, 10, 10]), batchBudget: 4_000, smallPathBudget: 2_000)
        var pieces: [String] = []
        var seen: [String: Int] = [:]
        while let piece = try batches.next() {
            switch piece {
            case .small(let partitions):
                pieces.append("small " + partitions.map(\.path).joined(separator: ","))
                for partition in partitions { seen[partition.path] = partition.records.count }
            case .large(let part):
                pieces.append("large \(part.path)")
                var lines: [Int] = []
                var ids: [String] = []
                while let record = try part.records.next() {
                    ids.append(record.id)
                    lines.append(part.records.line)
                }
                #expect(part.records.idsAscend)
                #expect(lines == (0..<ids.count).map { $0 + 1 }, "each record keeps its line")
                #expect(ids == ids.sorted() && Set(ids).count == ids.count)
                seen[part.path] = ids.count
            }
        }
        #expect(pieces == ["small p0,p1", "large p2", "small p3", "large p4", "small p5,p6,p7", "small p8,p9,p10"])
        #expect(seen == ["p0": 10, "p1": 10, "p2": 100, "p3": 10, "p4": 0, "p5": 10, "p6": 10, "p7": 10, "p8": 10, "p9": 10, "p10": 10])

        // However small, at most `maximumPaths` paths a run.
        var counted = PathBatches(paths(Array(repeating: 1, count: 10)), maximumPaths: 4)
        var runs: [Int] = []
        while let piece = try counted.next() {
            guard case .small(let partitions) = piece else { Issue.record("a one-record path streamed alone"); continue }
            runs.append(partitions.count)
        }
        #expect(runs == [4, 4, 2])
    }
}

/// The partition a test record names by its "set" field, as `import --partition-by set` reads it.
private enum PartitionRecordsKey {
    static func of(_ record: Record, in stream: RecordStream) throws -> String {
        guard case .string(let set)? = try JSONReader(bytes: record.isHidden ? stream.lastWritten : record.bytes).member("set") else {
            throw stream.failure("no set")
        }
        return set
    }
}
