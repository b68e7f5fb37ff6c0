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
        let next = try sortedLines(stream, memoryBudget: memoryBudget, maximumFanIn: maximumFanIn, progress: progress) { _ in "" }
        let sorted = RecordStream(name: stream.name, emptyIsIntended: stream.emptyIsIntended) { try next().map { ($0.record, $0.line) } }
        sorted.idsAscend = true
        return sorted
    }

    /// The records of `stream` grouped by what `group` says of each (a partition's path) and
    /// in ascending id order within each group, groups in ascending order (UTF-8 bytes): one
    /// ``PathRecords`` per group, as ``StoreWriter/importStreams(_:replace:recording:)``
    /// takes them, each with ``RecordStream/idsAscend`` set. A repeated id within a group is
    /// refused at its later line (``StoreError/duplicateID(_:)``), before it reaches a store.
    ///
    /// `group` is called as each record is read, so it may look at the stream
    /// (``RecordStream/lastWritten``: a tombstone's line as written). Each group's records
    /// must be read to their end before the next group is asked for; what is left unread is
    /// skipped.
    ///
    /// ```swift
    /// let next = try RecordSorter.grouped(input) { record in try partitionPath(of: record) }
    /// try await store.importStreams(next, replace: false, recording: nil)
    /// ```
    package static func grouped(
        _ stream: RecordStream, memoryBudget: Int = defaultMemoryBudget, maximumFanIn: Int = RecordSorter.maximumFanIn,
        progress: ((Int) -> Void)? = nil, by group: (Record) throws -> String
    ) throws -> @Sendable () throws -> PathRecords? {
        let next = try sortedLines(stream, memoryBudget: memoryBudget, maximumFanIn: maximumFanIn, progress: progress, group: group)
        // One reader: the store's writer, which asks for the groups and reads each in turn
        // (`RecordStream` is handed over the same way). Not a class of its own that claims
        // to be Sendable: only this closure ever reaches it.
        nonisolated(unsafe) let groups = try SortedGroups(name: stream.name, next: next)
        return { try groups.next() }
    }

    /// The records of `stream`, with their lines and groups, in ``LinedRecord/precedes(_:_:)``
    /// order: sorted in memory when they fit one run, else merged from spilled runs.
    private static func sortedLines(
        _ stream: RecordStream, memoryBudget: Int, maximumFanIn: Int, progress: ((Int) -> Void)?, group: (Record) throws -> String
    ) throws -> () throws -> LinedRecord? {
        var run: [LinedRecord] = []
        var runBytes = 0
        var spilled: [SpillRun] = []
        while let record = try stream.next() {
            let lined = LinedRecord(record: record, line: stream.line, group: try group(record))
            run.append(lined)
            runBytes += LinedRecord.footprint(of: lined)
            if runBytes >= memoryBudget {
                spilled.append(try SpillRun(writing: sortedRun(&run)))
                runBytes = 0
            }
            if stream.count % 100_000 == 0 { progress?(stream.count) }
        }
        if spilled.isEmpty {
            var records = sortedRun(&run).makeIterator()
            return { records.next() }
        }
        if !run.isEmpty { spilled.append(try SpillRun(writing: sortedRun(&run))) }
        while spilled.count > maximumFanIn {
            let group = Array(spilled.prefix(maximumFanIn))
            spilled.removeFirst(maximumFanIn)
            let merge = try RunMerge(group)
            spilled.append(try SpillRun(writing: merge.next))
        }
        let merge = try RunMerge(spilled)
        return merge.next
    }

    private static func sortedRun(_ run: inout [LinedRecord]) -> [LinedRecord] {
        run.sort(by: LinedRecord.precedes)
        defer { run = [] }
        return run
    }
}

/// A record, the line of the input it began on, and the group it is sorted into ("" when
/// the sort has no groups).
struct LinedRecord {
    var record: Record
    var line: Int
    var group: String

    /// Group, then id, then line.
    static func precedes(_ a: LinedRecord, _ b: LinedRecord) -> Bool {
        if a.group != b.group { return a.group.utf8Precedes(b.group) }
        if a.record.id == b.record.id { return a.line < b.line }
        return a.record.id.utf8Precedes(b.record.id)
    }

    /// What one record costs a run in memory: its bytes, its id, its group, and the array
    /// and string headers around them (an estimate, for the budget).
    static func footprint(of lined: LinedRecord) -> Int {
        lined.record.bytes.count + lined.record.id.utf8.count + lined.group.utf8.count + 112
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
            var group = lined.group
            var id = lined.record.id
            var header = Header(
                line: UInt64(lined.line), length: UInt32(lined.record.bytes.count), groupLength: UInt32(group.utf8.count),
                idLength: UInt32(id.utf8.count), isHidden: lined.record.isHidden ? 1 : 0)
            let written = withUnsafeBytes(of: &header) { fwrite($0.baseAddress, 1, Self.headerSize, file) }
                + group.withUTF8 { fwrite($0.baseAddress, 1, $0.count, file) }
                + id.withUTF8 { fwrite($0.baseAddress, 1, $0.count, file) }
                + lined.record.bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, file) }
            guard written == Self.headerSize + Int(header.groupLength) + Int(header.idLength) + lined.record.bytes.count else {
                throw Self.failure("cannot write the import's sort file (is the disk full? TMPDIR says where it goes)", in: directory)
            }
        }
        guard fflush(file) == 0 else { throw Self.failure("cannot write the import's sort file (is the disk full? TMPDIR says where it goes)", in: directory) }
        rewind(file)
    }

    /// Before each record: its line, its length, its group's and its id's lengths and
    /// whether it is a tombstone; then the group's bytes, the id's and the record's.
    private struct Header {
        var line: UInt64
        var length: UInt32
        var groupLength: UInt32
        var idLength: UInt32
        var isHidden: UInt32
    }

    private static let headerSize = MemoryLayout<Header>.size

    private static func failure(_ what: String, in directory: String) -> FileError {
        FileError(path: directory, reason: "\(what): \(String(cString: strerror(errno)))")
    }

    deinit {
        fclose(file)
    }

    /// The next record of the run, or nil at its end.
    func next() throws -> LinedRecord? {
        var header = Header(line: 0, length: 0, groupLength: 0, idLength: 0, isHidden: 0)
        let read = withUnsafeMutableBytes(of: &header) { fread($0.baseAddress, 1, Self.headerSize, file) }
        guard read == Self.headerSize else {
            if read == 0, feof(file) != 0 { return nil }
            throw Self.readFailure()
        }
        let group = header.groupLength == 0 ? "" : String(decoding: try bytes(Int(header.groupLength)), as: UTF8.self)
        let id = String(decoding: try bytes(Int(header.idLength)), as: UTF8.self)
        // Parsed when read from the input and written here by this process: not scanned again
        // (the merge is the one thread an import's last phase runs on; a scan was ~5 % of it).
        let record = Record(canonicalBytes: try bytes(Int(header.length)), id: id, isHidden: header.isHidden != 0)
        return LinedRecord(record: record, line: Int(header.line), group: group)
    }

    private func bytes(_ count: Int) throws -> [UInt8] {
        var complete = false
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            initialized = count == 0 ? 0 : fread(buffer.baseAddress, 1, count, file)
            complete = initialized == count
        }
        guard complete else { throw Self.readFailure() }
        return bytes
    }

    private static func readFailure() -> FileError {
        failure("the import's sort file could not be read back", in: FileManager.default.temporaryDirectory.path)
    }
}

/// A k-way merge of sorted runs: a heap of each run's next record.
final class RunMerge {
    /// A run's next record, ordered as ``LinedRecord/precedes(_:_:)`` orders records.
    private struct Head: Comparable {
        var lined: LinedRecord
        var run: Int
        static func < (a: Head, b: Head) -> Bool { LinedRecord.precedes(a.lined, b.lined) }
        static func == (a: Head, b: Head) -> Bool {
            a.lined.group == b.lined.group && a.lined.record.id == b.lined.record.id && a.lined.line == b.lined.line
        }
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

/// The groups of a sorted stream, one ``PathRecords`` each: a group's stream reads on until
/// the next record belongs to another group.
private final class SortedGroups {
    private let name: String
    private let pull: () throws -> LinedRecord?
    /// The next record not yet handed out.
    private var lookahead: LinedRecord?
    private var current: String?

    init(name: String, next: @escaping () throws -> LinedRecord?) throws {
        self.name = name
        pull = next
        lookahead = try next()
    }

    func next() throws -> PathRecords? {
        // What the store left unread of the group before (it stopped early) is skipped.
        while let skipped = lookahead, skipped.group == current { lookahead = try pull() }
        guard let first = lookahead else { return nil }
        let group = first.group
        current = group
        var previous: String?
        let records = RecordStream(name: name) { [unowned self] in
            guard let lined = self.lookahead, lined.group == group else { return nil }
            if lined.record.id == previous {
                let duplicate = StoreError.duplicateID(lined.record.id)
                var error = ImportError(source: self.name, line: lined.line, reason: duplicate.message)
                error.code = duplicate.code
                throw error
            }
            previous = lined.record.id
            self.lookahead = try self.pull()
            return (lined.record, lined.line)
        }
        records.idsAscend = true
        return PathRecords(path: group, records: records)
    }
}
