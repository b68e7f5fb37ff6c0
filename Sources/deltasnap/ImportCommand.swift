import ArgumentParser
import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapStoreLocation
import Foundation

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import NDJSON or a JSON array of records into a collection, as one new version.",
        discussion: """
            Each record is a JSON object with a string "id". Records are canonicalised and \
            diffed against the store: only records whose bytes changed are written, so \
            importing the same file twice creates no version. {"id":"X","hidden":true} \
            hides X. Any bad record aborts the whole import (FILE:LINE: reason on stderr, \
            exit 1) and nothing is committed.

            --collection NAME/KEY imports into one partition. --partition-by FIELD spreads \
            the records over partitions of NAME by the value of FIELD (a string or number: \
            {"id":"q1","set":"8271"} lands in NAME/8271; {"id":"q1","set":"8271","hidden":true} \
            hides it there), one version per partition touched, all in one transaction. \
            With --replace, each partition the input names loses the records it does not \
            list; partitions it does not name are left alone.

            --rules FILE (the file serve reads) names the memberships collection: an import \
            into it is checked first, and refused whole (one FILE:LINE line per bad record, \
            exit 1) when a record's role is not exactly "read" or "write" or its id is not a \
            partition NAME/KEY — such a record would grant nothing.

            Memory is bounded whatever the input's size and the order of its ids: the \
            records are sorted by id (with --partition-by: by partition, then id) in runs of 24 MB, spilled to unlinked temporary files \
            under TMPDIR (about the input's size on disk) and merged as they are written, \
            so the store appends them and a repeated id is refused at its later line. Peak \
            RSS stays under 100 MB (make bench-growth measures it at 10M records). Errors \
            in the input's JSON are found while it is read, before anything is written.
            """
    )

    @Option(name: .long, help: "Path of the SQLite store (created if missing), or a PostgreSQL URL (postgres://user@host:port/db; tables created on first use).")
    var db: String

    @Option(name: .long, help: "Collection name: [a-z0-9][a-z0-9_-]{0,63}, or NAME/KEY for one partition.")
    var collection: String

    @Option(name: .long, help: ArgumentHelp("Spread the records over partitions NAME/VALUE by the value of this field.", valueName: "FIELD"))
    var partitionBy: String?

    @Flag(name: .long, help: "Hide every stored record that the input does not contain.")
    var replace = false

    @Option(name: .long, help: ArgumentHelp("The access rules serve reads (--rules): an import into their memberships collection is checked record by record first.", valueName: "FILE"))
    var rules: String?

    @Flag(name: .long, help: "No progress lines on stderr.")
    var quiet = false

    @Argument(help: "NDJSON or JSON array file, or - for standard input.")
    var file: String

    func validate() throws {
        if partitionBy != nil, !CollectionName.isValid(collection) {
            throw ValidationError("--partition-by needs --collection NAME (the partitions are NAME/VALUE)")
        }
    }

    func run() async throws {
        try await reportingErrors {
            try CollectionPath.validate(collection)
            guard !ReviewPaths.isReserved(collection) else {
                throw ValidationError("\(collection): names starting with \(ReviewPaths.reservedPrefix) are kept for review workspaces")
            }
            let input = try checkedInput()
            if let partitionBy { return try await importPartitioned(by: partitionBy, from: input) }
            let started = ContinuousClock.now
            let quiet = self.quiet
            let progress: @Sendable (Int) -> Void = { count in
                if !quiet { printError("import: \(count) records read (\(rate(count, since: started)))") }
            }
            let name = input.name
            func openSource() throws -> ChunkSource { try input.open() }
            let written: @Sendable (Int) -> Void = { count in
                if !quiet { printError("import: \(count) records written (\(rate(count, since: started)))") }
            }
            let (result, target) = try await StoreLocation.withStore(db) { store in
                // A reviewed collection's import goes to its workspace (docs/PROTOCOL.md §13).
                let writer = try await ReviewRoutedStore.wrapping(store)
                // Sorted by id first, in bounded memory: the store then appends instead of
                // writing random pages, and keeps no id to refuse a repeat.
                let input = RecordStream(source: try openSource(), name: name)
                let sorted = try RecordSorter.sorted(input, progress: progress)
                if !quiet, input.count >= 100_000 { printError("import: \(input.count) records read and sorted by id; writing") }
                let result = try await writer.importRecords(from: sorted, into: collection, replace: replace, progress: written)
                return (result, result.collection)
            }
            let total = result.upserted + result.hidden + result.unchanged
            let into = target == collection ? collection : "\(collection) (its workspace, for review)"
            if result.committed, let head = result.head {
                print("\(into): version \(head.version) (token \(head.token)): \(result.upserted) upserted, \(result.hidden) hidden, \(result.unchanged) unchanged; \(head.count) visible [\(rate(total, since: started))]")
            } else {
                print("\(into): no change (\(result.unchanged) records already up to date)")
            }
        }
    }
}

extension ImportCommand {
    /// Where the records come from: the file, or standard input — read into memory first
    /// when it must be read twice (checked, then imported).
    private struct Input {
        var name: String
        var path: String?
        var buffered: [UInt8]?

        func open() throws -> ChunkSource {
            if let buffered { return ChunkSources.bytes(buffered) }
            if let path { return try ChunkSources.file(at: path) }
            return ChunkSources.standardInput()
        }
    }

    /// The input, checked first when it goes to the memberships collection of `--rules`:
    /// every record that would grant nothing is reported (FILE:LINE), and nothing is imported.
    private func checkedInput() throws -> Input {
        var input = Input(name: file == "-" ? "<stdin>" : file, path: file == "-" ? nil : file)
        guard let rules else { return input }
        guard let text = try? String(contentsOfFile: rules, encoding: .utf8) else { throw FileError(path: rules, reason: "cannot be read") }
        guard let memberships = try AccessRules(yaml: text).memberships, CollectionPath(collection)?.name == memberships else { return input }
        if input.path == nil { input.buffered = Array(FileHandle.standardInput.readDataToEndOfFile()) }
        let stream = RecordStream(source: try input.open(), name: input.name)
        var bad = 0
        while let record = try stream.next() {
            guard let problem = MembershipRecord.problem(in: record) else { continue }
            printError("\(input.name):\(stream.line): \(problem)")
            bad += 1
        }
        if bad > 0 {
            throw ImportRefused(reason: "\(bad) membership record\(bad == 1 ? "" : "s") would grant nothing; nothing was imported")
        }
        return input
    }

    private struct ImportRefused: Error, CustomStringConvertible {
        var reason: String
        var description: String { reason }
    }

    /// `--partition-by`: sorts the input by partition and id in bounded memory
    /// (``PartitionRecords/streams(_:collection:by:memoryBudget:progress:seeing:)``), then
    /// commits every partition it names in one transaction.
    private func importPartitioned(by field: String, from input: Input) async throws {
        let started = ContinuousClock.now
        let (quiet, collection, replace) = (self.quiet, self.collection, self.replace)
        let progress: (Int) -> Void = { count in
            if !quiet { printError("import: \(count) records read (\(rate(count, since: started)))") }
        }
        let stream = RecordStream(source: try input.open(), name: input.name)
        // Counted as each partition is written: a million partitions hold no million results.
        let tally = LockedValue(PartitionTally())
        let count: @Sendable (WriteResult) -> Void = { result in tally.withLock { $0.add(result) } }
        try await StoreLocation.withStore(db) { store in
            let settings = try await store.reviewSettings()
            // A reviewed collection's partitions are written in their workspaces, each
            // prepared before the write (a copy of what is published): their names are kept
            // while the input is read. Only then, so a million partitions cost no memory.
            let reviewed = settings[collection] != nil
            var named = Set<String>()
            let partitions = try PartitionRecords.streams(
                stream, collection: collection, by: field, progress: progress, seeing: reviewed ? { named.insert($0) } : nil)
            if !quiet, stream.count >= 100_000 { printError("import: \(stream.count) records read and sorted by partition and id; committing") }
            guard reviewed else { return try await store.importStreams(partitions, replace: replace, recording: nil, each: count) }
            let routed = ReviewRoutedStore(store, settings: settings)
            try await routed.prepare(named.sorted { $0.utf8Precedes($1) })
            try await routed.importStreams(partitions, replace: replace, recording: nil, each: count)
        }
        let total = tally.withLock { $0 }
        print("\(collection): \(total.partitions) partitions, \(total.versions) new versions: \(total.upserted) upserted, \(total.hidden) hidden, \(total.unchanged) unchanged [\(rate(stream.count, since: started))]")
    }

    /// What a partitioned import wrote, summed over its partitions.
    private struct PartitionTally {
        var partitions = 0, versions = 0, upserted = 0, hidden = 0, unchanged = 0

        mutating func add(_ result: WriteResult) {
            partitions += 1
            if result.committed { versions += 1 }
            upserted += result.upserted
            hidden += result.hidden
            unchanged += result.unchanged
        }
    }
}

func rate(_ count: Int, since start: ContinuousClock.Instant) -> String {
    let elapsed = ContinuousClock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    guard seconds > 0 else { return "\(count) records" }
    return String(format: "%.2f s, %.0f records/s", seconds, Double(count) / seconds)
}
