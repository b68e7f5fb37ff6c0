import DeltaSnapCore
@testable import DeltaSnapPostgresStore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// The store on a real PostgreSQL server (a throwaway cluster on 127.0.0.1): the same
/// versions, checksums, digests and export bytes as the SQLite store for the same input,
/// and versions in commit order under concurrent writers.
@Suite struct PostgresStoreTests {
    static let configuration = StoreConfiguration(epochForNewCollections: "00000000000000a1", fixedCommitTime: 1_790_000_000)

    func withCluster(_ body: (PostgresCluster, TemporaryDirectory) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let cluster = try await PostgresCluster.start(in: dir.path)
        defer { cluster.stop() }
        try await body(cluster, dir)
    }

    func stream(_ text: String, _ name: String = "input") -> RecordStream {
        RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: name)
    }

    /// The same five writes (additions, changes, hides, un-hides, a replace) into both stores.
    @Test func theSameInputGivesTheSameStateAsSQLite() async throws {
        try await withCluster { cluster, dir in
            let sqlite = try SQLiteDatabase(path: dir.file("s.sqlite"), configuration: Self.configuration)
            let postgres = try await PostgresDatabase.connect(cluster.url, configuration: Self.configuration)
            let writes: [(String, Bool)] = [
                (Fixtures.ndjson(0..<5000), false),  // more than one digest batch (2,048)
                (Fixtures.ndjson(200..<400, revision: 1), false),
                (#"{"id":"r0000005","hidden":true}"# + "\n" + #"{"id":"r0000006","hidden":true}"# + "\n" + #"{"id":"nope","hidden":true}"#, false),
                (Fixtures.ndjson(0..<10) + #"{"id":"tab\there","é":"ü"}"# + "\n", false),
                (Fixtures.ndjson(50..<120), true),
                (Fixtures.ndjson(50..<120), true),  // no change: no version
            ]
            for (index, (text, replace)) in writes.enumerated() {
                let expected = try Importer(store: sqlite, collection: "items", replace: replace).run(source: ChunkSources.bytes(Array(text.utf8)), name: "input")
                let got = try await postgres.importRecords(from: stream(text), into: "items", replace: replace)
                #expect(got == expected, "write \(index)")
            }
            var exported: [UInt8] = []
            let cursor = try await postgres.openRecords(in: "items", after: nil)
            while try await cursor.next({ exported += Array($0) + [0x0A] }) {}
            await cursor.close()
            #expect(exported == Array(try Fixtures.export(sqlite, "items").utf8))
            #expect(try await postgres.head(of: "items") == (try sqlite.head(of: "items")))
            let digest = try await postgres.digest(of: "items")
            #expect(digest == (try sqlite.read { try $0.digest(of: "items") }))
            #expect(try await postgres.recomputedDigest(of: "items") == digest)
            #expect(try await postgres.publicationSequence() == (try sqlite.read { try $0.publicationSequence() }))
            #expect(try await postgres.collections().map(\.name) == ["items"])
            #expect(try await postgres.head(of: "missing") == nil)
            await postgres.close()
        }
    }

    /// A full body streams from the primary key whatever the table's statistics say: right
    /// after an import, before autovacuum analyzed the table, the planner fetched and sorted
    /// every record before the first byte (0.85 s at 1M records; gigabytes sorted on disk at 10M).
    @Test func aFullBodyIsReadInKeyOrderBeforeTheTableIsAnalyzed() async throws {
        try await withCluster { cluster, _ in
            let postgres = try await PostgresDatabase.connect(cluster.url)
            _ = try await postgres.importRecords(from: stream(Fixtures.ndjson(0..<50_000)), into: "items")
            let unhinted = try await postgres.readPlan(of: "items", after: nil, settled: false)
            #expect(unhinted.first?.hasPrefix("Sort") == true, "the case this guards against is no longer met: \(unhinted)")
            let plan = try await postgres.readPlan(of: "items", after: nil, settled: true)
            #expect(plan.first?.contains("Index Scan using deltasnap_records_pkey") == true && !plan.contains { $0.contains("Sort") }, "\(plan)")
            await postgres.close()
        }
    }

    /// A 1-record delta reads the `(cid, version)` index whatever the statistics say. They
    /// are the whole table's, and versions are numbered per collection: once another
    /// collection held many records at a version above this one's base (a replace hid them),
    /// the planner expected a large share of this collection to have changed and scanned
    /// every collection's records for one (0.66 s at 10M records). A small table costs too
    /// little to show it, so random reads are priced as on a table far larger than memory.
    @Test func aOneRecordDeltaReadsTheVersionIndexWhateverOtherCollectionsHold() async throws {
        try await withCluster { cluster, _ in
            try await cluster.sql("ALTER DATABASE postgres SET random_page_cost = 100")
            let postgres = try await PostgresDatabase.connect(cluster.url)
            _ = try await postgres.importRecords(from: stream(Fixtures.ndjson(0..<30_000)), into: "replaced")
            _ = try await postgres.importRecords(from: stream(Fixtures.ndjson(0..<10)), into: "replaced", replace: true)
            _ = try await postgres.importRecords(from: stream(Fixtures.ndjson(0..<50_000)), into: "items")
            _ = try await postgres.importRecords(from: stream(Fixtures.ndjson(7..<8, revision: 1)), into: "items")
            try await cluster.sql("ANALYZE deltasnap_records")
            let unhinted = try await postgres.readPlan(of: "items", after: 1, settled: false)
            #expect(unhinted.contains { $0.contains("Seq Scan on deltasnap_records") }, "the case this guards against is no longer met: \(unhinted)")
            let plan = try await postgres.readPlan(of: "items", after: 1, settled: true)
            #expect(
                plan.contains { $0.contains("deltasnap_records_by_version") } && !plan.contains { $0.contains("Seq Scan") || $0.contains("Gather") },
                "\(plan)")
            // The delta itself, read under that setting: the one record.
            let cursor = try await postgres.openRecords(in: "items", after: 1)
            var lines: [String] = []
            while try await cursor.next({ lines.append(String(decoding: $0, as: UTF8.self)) }) {}
            await cursor.close()
            #expect(lines.count == 1 && lines[0].contains(#""id":"r0000007""#), "\(lines)")
            await postgres.close()
        }
    }

    /// Three connections write one collection at once: versions 1…N with no gap, each
    /// holding exactly one write's records, in the order the writes committed.

    @Test func concurrentWritersGetGapFreeVersions() async throws {
        try await withCluster { cluster, _ in
            let writers = try await withThrowingTaskGroup(of: PostgresDatabase.self) { group in
                for _ in 0..<3 { group.addTask { try await PostgresDatabase.connect(cluster.url) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let versions = try await withThrowingTaskGroup(of: [UInt64].self) { group in
                for (w, writer) in writers.enumerated() {
                    group.addTask {
                        var versions: [UInt64] = []
                        for round in 0..<10 {
                            let text = (0..<5).map { #"{"id":"w\#(w)-\#(round)-\#($0)"}"# }.joined(separator: "\n")
                            let result = try await writer.importRecords(
                                from: RecordStream(source: ChunkSources.bytes(Array(text.utf8)), name: "w"), into: "items")
                            versions.append(try #require(result.head).version)
                        }
                        return versions
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(versions.sorted() == Array(1...30))
            let head = try #require(try await writers[0].head(of: "items"))
            #expect(head.version == 30 && head.count == 150)
            #expect(try await writers[0].recomputedDigest(of: "items") == (try await writers[0].digest(of: "items")))
            for writer in writers { await writer.close() }
        }
    }

    @Test func badInputCommitsNothingAndBadURLsAreRefused() async throws {
        try await withCluster { cluster, _ in
            let store = try await PostgresDatabase.connect(cluster.url)
            _ = try await store.importRecords(from: stream(Fixtures.ndjson(0..<5)), into: "items")
            await #expect(throws: ImportError.self) {
                try await store.importRecords(from: stream(#"{"id":"a"}"# + "\n" + #"{"no id":1}"#), into: "items")
            }
            await #expect(throws: ImportError.self) {
                try await store.importRecords(from: stream(#"{"id":"a"}"# + "\n" + #"{"id":"a","x":1}"#), into: "items")
            }
            await #expect(throws: ImportError.self) { try await store.importRecords(from: stream(""), into: "items", replace: true) }
            #expect(try await store.head(of: "items")?.version == 1)
            await store.close()
            // Connecting again finds the schema in place.
            let again = try await PostgresDatabase.connect(cluster.url)
            #expect(try await again.head(of: "items")?.count == 5)
            await again.close()
            for bad in ["postgres://", "postgres://127.0.0.1/db", "postgres://u@host", "mysql://u@h/db"] {
                #expect(throws: StoreError.self, "\(bad)") { _ = try PostgresURL(bad) }
            }
            await #expect(throws: StoreError.self) { _ = try await PostgresDatabase.connect("postgres://u@127.0.0.1:1/db") }
        }
    }

    /// TLS as libpq's `sslmode`, `prefer` by default (PostgresNIO's own default); a test
    /// cluster offers none, so `prefer` falls back to plain and `require` cannot connect.
    @Test func sslmodeChoosesTLS() async throws {
        #expect(try PostgresURL("postgres://u@h/db").tlsMode == .prefer)
        #expect(try PostgresURL("postgres://u@h/db?sslmode=verify-full").tlsMode == .verifyFull)
        #expect(try PostgresURL("postgres://u@h/db?sslmode=disable").tlsMode == .disable)
        #expect(throws: StoreError.self) { try PostgresURL("postgres://u:pw@h/db?sslmode=allow") }
        #expect(throws: StoreError.self) { try PostgresURL("postgres://u@h/db?timeout=3") }
        try await withCluster { cluster, _ in
            let preferred = try await PostgresCollectionStore.connect(url: cluster.url)
            #expect(try await preferred.collections().isEmpty)
            await preferred.close()
            await #expect(throws: StoreError.self) { _ = try await PostgresCollectionStore.connect(url: cluster.url + "?sslmode=require") }
        }
    }

    /// `deltasnap import` and `export` take a PostgreSQL URL for `--db`.
    @Test func theCLIImportsAndExportsThroughAURL() async throws {
        try await withCluster { cluster, dir in
            let input = try dir.write("in.ndjson", Fixtures.ndjson(0..<50))
            let imported = try await CLI.run(["import", "--db", cluster.url, "--collection", "items", input])
            #expect(imported.status == 0, "\(imported.stderr)")
            #expect(imported.stdout.contains("items: version 1"))
            let sqlite = dir.file("s.sqlite")
            _ = try await CLI.run(["import", "--db", sqlite, "--collection", "items", input])
            let fromPostgres = try await CLI.run(["export", "--db", cluster.url, "--collection", "items"])
            let fromSQLite = try await CLI.run(["export", "--db", sqlite, "--collection", "items"])
            #expect(fromPostgres.status == 0 && fromPostgres.stdout == fromSQLite.stdout && !fromSQLite.stdout.isEmpty)
            // Ids out of order (sorted on the way in): the same records; a repeated id is
            // refused at its own, later line, and nothing of that import is kept.
            let lines = Array(Fixtures.ndjson(0..<50).split(separator: "\n").map(String.init).reversed())
            let shuffled = try dir.write("shuffled.ndjson", lines.joined(separator: "\n") + "\n")
            let sorted = try await CLI.run(["import", "--db", cluster.url, "--collection", "copy", shuffled])
            #expect(sorted.status == 0, "\(sorted.stderr)")
            #expect(try await CLI.run(["export", "--db", cluster.url, "--collection", "copy"]).stdout == fromSQLite.stdout)
            let repeated = try dir.write("repeated.ndjson", (lines + [lines[7]]).joined(separator: "\n") + "\n")
            let refused = try await CLI.run(["import", "--db", cluster.url, "--collection", "other", repeated])
            #expect(refused.status == 1 && refused.stderr.contains("repeated.ndjson:51:"), "\(refused.stderr)")
            #expect(try await CLI.run(["export", "--db", cluster.url, "--collection", "other"]).status == 1)
            let unknown = try await CLI.run(["export", "--db", cluster.url, "--collection", "nope"])
            #expect(unknown.status == 1 && unknown.stderr.contains("does not exist"))
            let unreachable = try await CLI.run(["import", "--db", "postgres://u@127.0.0.1:1/db", "--collection", "items", input])
            #expect(unreachable.status == 1 && unreachable.stderr.hasPrefix("deltasnap: cannot reach PostgreSQL"))
        }
    }
}

extension PostgresDatabase {
    /// One collection's import through the write primitive, as the store's `importRecords` makes it.
    fileprivate func importRecords(from stream: RecordStream, into collection: String, replace: Bool = false) async throws -> WriteResult {
        var written: WriteResult?
        try await commit(StoreWrite([.records(stream, into: collection, replace: replace, progress: nil)])) {
            if case .written(_, let result) = $0 { written = result }
        }
        return try #require(written)
    }
}
