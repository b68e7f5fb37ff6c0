import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// A sync step costs O(changes), not O(replica) (issue 44): what a one-record delta makes
/// the replica's SQLite read — counted by SQLite itself, not timed — is the same on a
/// 100,000-record replica as on a 1,000-record one, with files referred to or without.
/// Real server on 127.0.0.1, real replica files. One test at a time: each applies a
/// 100k-record replica, SQLite work the client's actor does on the cooperative pool, which two
/// at once would fill (stalling every in-process test server's handlers).
@Suite(.serialized) struct SyncCostTests {
    /// What SQLite read while a replica of `records` records (`files` of them referring to
    /// a file, eagerly downloaded) pulled a one-record delta — which gives a file record a
    /// new file when there are files.
    struct Measured {
        var delta: ReadStatistics
        /// The same replica's `verify()`, which reads every record: proves the counter sees a scan.
        var verify: ReadStatistics
        var downloaded: Int
    }

    func measureDelta(records: Int, files: Int) async throws -> Measured {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("s.sqlite")
        // Seconds of synchronous SQLite at 100k records: off Swift's cooperative pool, whose
        // two threads here also run every in-process test server's handlers (blocked, they
        // stalled other suites' requests past their 30 s timeouts).
        try await offPool {
            let store = try SQLiteDatabase(path: path)
            try Fixtures.importText(Fixtures.ndjson(0..<records), into: store, collection: "items")
        }
        let owner = try SQLiteCollectionStore(path: path)
        var lines: [String] = []
        for index in 0..<files {
            let reference = try await store(Self.photo(index), in: owner)
            lines.append(#"{"id":"f\#(index)","photo":\#(reference)}"#)
        }
        if !lines.isEmpty { _ = try await owner.importBatch(Array(lines.joined(separator: "\n").utf8), into: "items") }
        let server = try await TestServer.start(database: path)
        return try await server.stopping {
            let replica = try DeltaSnapReplica(
                path: dir.file("replica.sqlite"), collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!,
                retryPolicy: RetryPolicy(initialDelay: 0.01, maximumDelay: 0.05), timeout: .seconds(60))
            let first = await replica.pull(ignoringBackoff: true)
            guard case .applied = first else { throw Failure("the first pull: \(first)") }
            #expect(await replica.lastAttachmentReport.downloaded == files)

            // One record changes on the server: a file record gets a new file.
            let changed = files > 0
                ? #"{"id":"f0","photo":\#(try await store(Self.photo(1_000_000), in: owner))}"#
                : String(decoding: SyntheticLine.changed(index: records / 2), as: UTF8.self)
            _ = try await owner.importBatch(Array(changed.utf8), into: "items")
            await owner.close()

            var delta: ReadStatistics?
            for _ in 0..<500 where delta == nil {
                await replica.resetReadStatistics()
                let outcome = await replica.pull(ignoringBackoff: true)
                switch outcome {
                case .applied(let result):
                    #expect(result.changed == 1)
                    delta = await replica.readStatistics
                case .notModified: try await Task.sleep(for: .milliseconds(20))  // the server's watcher has not seen it yet
                default: throw Failure("the delta: \(outcome)")
                }
            }
            guard let delta else { throw Failure("the server never served the change") }
            let downloaded = await replica.lastAttachmentReport.downloaded
            if files > 0 {
                // What a file reference does still holds: the new file is here, the old one let go.
                let statuses = try await replica.attachmentStatuses()
                #expect(statuses.count == files && statuses.allSatisfy { $0.state == "cached" })
                #expect(try await replica.attachmentReference(AttachmentVerifier.sha256(of: Self.photo(0))) == nil)
            }
            await replica.resetReadStatistics()
            #expect(try await replica.verify())
            return Measured(delta: delta, verify: await replica.readStatistics, downloaded: downloaded)
        }
    }

    @Test(arguments: [0, 20])
    func aOneRecordDeltaReadsAsMuchOnAHundredThousandRecordsAsOnAThousand(files: Int) async throws {
        let small = try await measureDelta(records: 1_000, files: files)
        let large = try await measureDelta(records: 100_000, files: files)
        // The counter sees a scan: verify reads every record (a range of the primary key,
        // which SQLite does not call a full scan: steps and pages are what show it).
        #expect(large.verify.virtualMachineSteps >= 100_000 && large.verify.pagesRead >= 20 * small.verify.pagesRead, "\(small.verify) \(large.verify)")
        #expect(small.downloaded == (files > 0 ? 1 : 0) && large.downloaded == small.downloaded)
        // No scan grows with the replica: the rows visited by scans are the same few (the state
        // table's rows, the schema's), and every other read is an index probe whose depth
        // grows with log(n) — a few pages, not a hundred times as many.
        #expect(large.delta.fullScanSteps <= small.delta.fullScanSteps + 20, "scans: \(small.delta) vs \(large.delta)")
        // (Measured: 884 steps and 52 → 58 pages without files, 1,186 steps and 76 → 82 pages
        // with them; scanning the records made it 400,000 steps at 100k.)
        #expect(large.delta.virtualMachineSteps <= small.delta.virtualMachineSteps * 11 / 10, "steps: \(small.delta) vs \(large.delta)")
        #expect(large.delta.pagesRead <= small.delta.pagesRead * 3 / 2, "pages: \(small.delta) vs \(large.delta)")
    }

    /// A replica from before the index (no `attachment_refs`) gets it built from its records
    /// on first open; its files are then kept and let go as before.
    @Test func anOldReplicaGetsItsFileReferencesIndexedOnFirstOpen() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("s.sqlite")
        do {
            let store = try SQLiteDatabase(path: path)
            try Fixtures.importText(Fixtures.ndjson(0..<50), into: store, collection: "items")
        }
        let owner = try SQLiteCollectionStore(path: path)
        let first = try await store(Self.photo(1), in: owner)
        let second = try await store(Self.photo(2), in: owner)
        _ = try await owner.importBatch(Array(#"{"id":"f1","photo":\#(first)}"#.utf8), into: "items")
        let server = try await TestServer.start(database: path)
        try await server.stopping {
            let url = URL(string: "\(server.baseURL)/v1/collections/items")!
            let replicaPath = dir.file("replica.sqlite")
            do {
                let replica = try DeltaSnapReplica(path: replicaPath, collection: "items", url: url)
                await replica.pull(ignoringBackoff: true)
                #expect(try await replica.attachmentStatuses().map(\.state) == ["cached"])
            }
            // What an older release left: no index, no bookkeeping of it.
            do {
                let db = try SQLiteConnection(path: replicaPath)
                try db.execute("""
                    DROP TABLE attachment_refs; DROP TABLE attachment_changes;
                    DELETE FROM state WHERE key = 'attachmentsSettled';
                    """)
            }
            // Opened again: the reference is found without a sync.
            let replica = try DeltaSnapReplica(path: replicaPath, collection: "items", url: url)
            #expect(try await replica.attachmentReference(first.sha256) == first)
            // The record's file replaced on the server: the old file goes, the new one comes.
            _ = try await owner.importBatch(Array(#"{"id":"f1","photo":\#(second)}"#.utf8), into: "items")
            await owner.close()
            for _ in 0..<500 {
                if case .applied = await replica.pull(ignoringBackoff: true) { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(try await replica.attachmentStatuses().map(\.sha256) == [second.sha256])
            #expect(try await replica.attachmentStatuses().map(\.state) == ["cached"])
            let cached = try FileManager.default.contentsOfDirectory(atPath: replicaPath + ".attachments/cached")
            #expect(cached == [second.sha256], "the replaced file was not let go")
        }
    }

    /// Offline writes index their references as they are queued, and a refused write's
    /// reference goes with it (the rollback of a local write).
    @Test func aLocalWritesReferenceIsIndexedAndLeavesWithTheWrite() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try DeltaSnapReplica(
            path: dir.file("replica.sqlite"), collection: "items", url: URL(string: "http://127.0.0.1:9/v1/collections/items")!)
        let file = dir.file("photo.jpg")
        FileManager.default.createFile(atPath: file, contents: Data(Self.photo(3)))
        let reference = try await replica.attach(URL(fileURLWithPath: file), type: "image/jpeg")
        try await replica.put(id: "n1", json: #"{"photo":\#(reference)}"#)
        #expect(try await replica.attachmentReference(reference.sha256) == reference)
        // The write replaced by a later one (coalesced while unsent): the reference goes with it.
        try await replica.put(id: "n1", json: #"{"title":"no photo"}"#)
        #expect(try await replica.attachmentReference(reference.sha256) == nil)
        let rows = try SQLiteConnection(path: dir.file("replica.sqlite")).scalarInt("SELECT count(*) FROM attachment_refs")
        #expect(rows == 0)
    }

    // MARK: - Helpers

    static func photo(_ seed: Int) -> [UInt8] { (0..<(500 + seed % 97)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) } }

    /// Stores `bytes` in the server's store; returns the reference to put in a record.
    func store(_ bytes: [UInt8], in owner: SQLiteCollectionStore) async throws -> AttachmentReference {
        let reference = try AttachmentReference(sha256: AttachmentVerifier.sha256(of: bytes), size: UInt64(bytes.count), type: "image/png")
        var sent = false
        try await owner.storeAttachment(reference) {
            defer { sent = true }
            return sent ? nil : bytes
        }
        return reference
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

/// A synthetic record at a new revision, as NDJSON.
enum SyntheticLine {
    static func changed(index: Int) -> [UInt8] {
        Array(Fixtures.ndjson(index..<(index + 1), revision: 1).utf8.dropLast())
    }
}
