import DeltaSnapCore
import Foundation
import HeapModule

/// An import's records in ascending id order, whatever order its input gave them, in bounded
/// memory: an external merge sort. Records are read in runs of at most ``memoryBudget`` bytes,
/// each run sorted in memory and, when the input is larger than one run, written to an
/// unlinked temporary file; the runs are then merged as the store reads them.
///
/// Why: a store writes ascending ids by appending to its B-tree, but shuffled ids land on
/// random leaves, and once the collection outgrows the page cache every record costs a leaf
/// read and a dirty page — `import` of 10M shuffled ids took 2.1× the per-record time of 1M
/// (docs/BENCHMARKS.md, the growth table). Sorted first, every record is an append (10M:
/// 1.47× of 1M's per-record time, and both ~3–4× faster than unsorted), and an ascending
/// stream needs no memory of the ids seen (a repeat is one out of order).
///
/// No listed library sorts on disk; this is the textbook two-phase merge (runs, then one
/// k-way merge through swift-collections' `Heap`; more than ``maximumFanIn`` runs are merged
/// in groups).
///
/// ```swift
/// let input = RecordStream(source: try ChunkSources.file(at: "big.ndjson"), name: "big.ndjson")
/// let sorted = try RecordSorter.sorted(input)        // idsAscend == true
/// try await store.importRecords(from: sorted, into: "items", replace: false, progress: nil)
/// ```
///
/// A repeated id comes out twice in a row, in the order of its lines, so the store refuses
/// the later line. Errors in the input (bad JSON, a record without an id) are found while the
/// runs are read, before anything is written.
package enum RecordSorter {
    /// How many bytes of records one in-memory run may hold (counting each record's
    /// bookkeeping): the import's memory ceiling, beside the store's own cache.
    package static let defaultMemoryBudget = 24 << 20
    /// At most this many runs are read at once, a 64 KiB buffer each (16 MB at most): one
    /// merge up to ~6 GB of input (~25M records of 250 bytes). A merge of merges re-reads and
    /// re-writes what it groups (30 s of a 10M-record import at a fan-in of 64).
    package static let maximumFanIn = 256
    static let readBuffer = 64 << 10

    /// The records of `stream` in ascending id order (UTF-8 bytes; a repeat by line), as a
    /// stream with ``RecordStream/idsAscend`` set whose ``RecordStream/line`` is each record's
    /// line in the input. `progress` gets the count of records read every 100,000.
    package static func sorted(
        _ stream: RecordStream, memoryBudget: Int = defaultMemoryBudget, progress: ((Int) -> Void)? = nil
    ) throws -> RecordStream {
        try sorted(stream, memoryBudget: memoryBudget, maximumFanIn: maximumFanIn, progress: progress)
    }

    /// ``sorted(_:memoryBudget:progress:)`` merging at most `maximumFanIn` runs at once (tests lower it).
    package static func sorted(
        _ stream: RecordStream, memoryBudget: Int, maximumFanIn: Int, progress: ((Int) -> Void)? = nil
    ) throws -> RecordStream {
        var run: [LinedRecord] = []
        var runBytes = 0
        var spilled: [SpillRun] = []
        while let record = try stream.next() {
            run.append(LinedRecord(record: record, line: stream.line))
            runBytes += LinedRecord.footprint(of: record)
            if runBytes >= memoryBudget {
                spilled.append(try SpillRun(writing: sortedRun(&run)))
                runBytes = 0
            }
            if stream.count % 100_000 == 0 { progress?(stream.count) }
        }
        let sorted: RecordStream
        if spilled.isEmpty {
            var records = sortedRun(&run).makeIterator()
            sorted = RecordStream(name: stream.name, emptyIsIntended: stream.emptyIsIntended) { records.next().map { ($0.record, $0.line) } }
        } else {
            if !run.isEmpty { spilled.append(try SpillRun(writing: sortedRun(&run))) }
            while spilled.count > maximumFanIn {
                let group = Array(spilled.prefix(maximumFanIn))
                spilled.removeFirst(maximumFanIn)
                let merge = try RunMerge(group)
                spilled.append(try SpillRun(writing: merge.next))
            }
            let merge = try RunMerge(spilled)
            sorted = RecordStream(name: stream.name, emptyIsIntended: stream.emptyIsIntended) { try merge.next().map { ($0.record, $0.line) } }
        }
        sorted.idsAscend = true
        return sorted
    }

    private static func sortedRun(_ run: inout [LinedRecord]) -> [LinedRecord] {
        run.sort(by: LinedRecord.precedes)
        defer { run = [] }
        return run
    }
}

/// A record and the line of the input it began on.
struct LinedRecord {
    var record: Record
    var line: Int

    static func precedes(_ a: LinedRecord, _ b: LinedRecord) -> Bool {
        if a.record.id == b.record.id { return a.line < b.line }
        return a.record.id.utf8Precedes(b.record.id)
    }

    /// What one record costs a run in memory: its bytes, its id, and the array and string
    /// headers around them (an estimate, for the budget).
    static func footprint(of record: Record) -> Int {
        record.bytes.count + record.id.utf8.count + 96
    }
}

/// One sorted run in an unlinked temporary file (nothing is left behind, even by a kill),
/// written once and read back once: per record its line, its length and its canonical bytes.
final class SpillRun {
    private let file: UnsafeMutablePointer<FILE>

    /// Writes `records` and rewinds for reading.
    convenience init(writing records: [LinedRecord]) throws {
        var iterator = records.makeIterator()
        try self.init { iterator.next() }
    }

    /// Writes what `next` yields until nil (a merge of earlier runs), and rewinds for reading.
    init(writing next: () throws -> LinedRecord?) throws {
        let directory = FileManager.default.temporaryDirectory.path
        var template = Array("\(directory)/deltasnap-import-XXXXXX".utf8CString)
        let descriptor = mkstemp(&template)
        guard descriptor >= 0 else { throw Self.failure("cannot create the import's sort file", in: directory) }
        // Unlinked at once: the space goes back when the file is closed, even by a kill.
        unlink(template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        guard let file = fdopen(descriptor, "w+") else {
            close(descriptor)
            throw Self.failure("cannot open the import's sort file", in: directory)
        }
        self.file = file
        setvbuf(file, nil, _IOFBF, RecordSorter.readBuffer)
        while let lined = try next() {
            var header = (UInt64(lined.line), UInt32(lined.record.bytes.count))
            let written = withUnsafeBytes(of: &header) { fwrite($0.baseAddress, 1, Self.headerSize, file) }
                + lined.record.bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, file) }
            guard written == Self.headerSize + lined.record.bytes.count else {
                throw Self.failure("cannot write the import's sort file (is the disk full? TMPDIR says where it goes)", in: directory)
            }
        }
        guard fflush(file) == 0 else { throw Self.failure("cannot write the import's sort file (is the disk full? TMPDIR says where it goes)", in: directory) }
        rewind(file)
    }

    /// The line (8 bytes) and the length (4) before each record's bytes.
    private static let headerSize = 12

    private static func failure(_ what: String, in directory: String) -> FileError {
        FileError(path: directory, reason: "\(what): \(String(cString: strerror(errno)))")
    }

    deinit {
        fclose(file)
    }

    /// The next record of the run, or nil at its end.
    func next() throws -> LinedRecord? {
        var header = (UInt64(0), UInt32(0))
        let read = withUnsafeMutableBytes(of: &header) { fread($0.baseAddress, 1, Self.headerSize, file) }
        guard read == Self.headerSize else {
            if read == 0, feof(file) != 0 { return nil }
            throw Self.failure("the import's sort file could not be read back", in: FileManager.default.temporaryDirectory.path)
        }
        let count = Int(header.1)
        var complete = false
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            initialized = count == 0 ? 0 : fread(buffer.baseAddress, 1, count, file)
            complete = initialized == count
        }
        guard complete else { throw Self.failure("the import's sort file could not be read back", in: FileManager.default.temporaryDirectory.path) }
        // Canonical bytes: the record scanner validates them in one pass, no re-canonicalising.
        return LinedRecord(record: try Record.parse(bytes), line: Int(header.0))
    }
}

/// A k-way merge of sorted runs: a heap of each run's next record.
final class RunMerge {
    /// A run's next record, ordered as ``LinedRecord/precedes(_:_:)`` orders records.
    private struct Head: Comparable {
        var lined: LinedRecord
        var run: Int
        static func < (a: Head, b: Head) -> Bool { LinedRecord.precedes(a.lined, b.lined) }
        static func == (a: Head, b: Head) -> Bool { a.lined.record.id == b.lined.record.id && a.lined.line == b.lined.line }
    }

    private let runs: [SpillRun]
    private var heads = Heap<Head>()

    init(_ runs: [SpillRun]) throws {
        self.runs = runs
        for (index, run) in runs.enumerated() {
            if let first = try run.next() { heads.insert(Head(lined: first, run: index)) }
        }
    }

    func next() throws -> LinedRecord? {
        guard let smallest = heads.min else { return nil }
        if let following = try runs[smallest.run].next() {
            heads.replaceMin(with: Head(lined: following, run: smallest.run))
        } else {
            heads.removeMin()
        }
        return smallest.lined
    }
}
