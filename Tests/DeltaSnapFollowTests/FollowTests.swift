import DeltaSnapCore
import DeltaSnapFollow
import DeltaSnapPostgresStore
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTestSupport
import Foundation
import Logging
import Testing

/// `SourceFollower` against a real PostgreSQL source (`wal_level=logical`) publishing into
/// each destination store: the SQLite file, and DeltaSnap's PostgreSQL store on the same
/// server as the source.
@Suite struct FollowTests {
    static let logger = Logger(label: "follow-test")

    /// A source with `countries` and `attempts` (partitioned by `user_id`), a destination
    /// store, and a follower running in a task until `body` ends.
    func withFollower(
        _ backend: TestBackend, logs: CapturingLogHandler.Lines = CapturingLogHandler.Lines([]), spillRows: Int = 50_000,
        reviewed: [String: ReviewSettings] = [:], _ body: @Sendable (SourceDatabase, any CollectionStore) async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = try await SourceDatabase.start(in: dir)
        do {
            try await source.run("CREATE TABLE countries(code text PRIMARY KEY, name text, population bigint, area numeric, tags text[], meta jsonb, founded timestamptz, flag bytea, ok bool)")
            try await source.run("CREATE TABLE attempts(user_id text, id int, score int, PRIMARY KEY(user_id, id))")
            try await source.transaction([
                #"INSERT INTO countries VALUES ('AD', 'Andorra', 77000, 468.76, '{a,"b c"}', '{"x": 1}', '1278-09-08 00:00:00+00', '\x0102', true)"#,
                "INSERT INTO countries(code, name) VALUES ('FR', 'France')",
                "INSERT INTO attempts VALUES ('alice', 1, 3), ('bob', 1, 5)",
            ])
            let store = try await StoreLocation(backend == .sqlite ? dir.file("s.sqlite") : source.url).open(configuration: StoreConfiguration())
            let options = FollowOptions(
                source: try PostgresURL(source.url),
                tables: [FollowedTable(schema: "public", table: "countries", collection: "countries"),
                         FollowedTable(schema: "public", table: "attempts", collection: "attempts", partitionBy: "user_id")],
                slot: "deltasnap", publication: "deltasnap", create: true, pollInterval: .milliseconds(10), checkInterval: .milliseconds(100),
                spillRows: spillRows)
            let logger = Logger(label: "follow-test") { _ in CapturingLogHandler(lines: logs) }
            // As `deltasnap follow` runs: reviewed collections' changes go to their workspaces.
            if !reviewed.isEmpty { try await store.setReviewSettings(reviewed) }
            let follower = SourceFollower(options: options, store: try await ReviewRoutedStore.wrapping(store), logger: logger) { _ in }
            let task = Task { try await follower.run() }
            do {
                try await body(source, store)
            } catch {
                task.cancel()
                _ = await task.result
                await store.close()
                throw error
            }
            task.cancel()
            _ = await task.result
            await store.close()
        } catch {
            await source.stop()
            throw error
        }
        await source.stop()
    }

    /// Waits (up to 20 s) until `collection` is at `version`.
    static func waitFor(_ collection: String, version: UInt64, in store: any CollectionStore) async throws {
        if try await eventually(within: .seconds(20), every: .milliseconds(10), { (try await store.head(of: collection)?.version ?? 0) >= version }) {
            return
        }
        Issue.record("\(collection) never reached version \(version): \(String(describing: try await store.head(of: collection)))")
        throw CancellationError()
    }

    /// Waits (up to 20 s) for a file to appear (a store a child process creates).
    static func waitForFile(_ path: String) async throws {
        let appeared = try await eventually(within: .seconds(20), every: .milliseconds(50)) { FileManager.default.fileExists(atPath: path) }
        if !appeared { Issue.record("\(path) never appeared") }
    }

    static func export(_ collection: String, from store: any CollectionStore) async throws -> String {
        var out: [UInt8] = []
        try await store.export(collection) { out += $0 }
        return String(decoding: out, as: UTF8.self)
    }

    @Test(arguments: TestBackend.allCases) func eachSourceTransactionIsOneVersionOfWhatItTouched(_ backend: TestBackend) async throws {
        let logs = CapturingLogHandler.Lines([])
        try await withFollower(backend, logs: logs) { source, store in
            // The copy: one version per collection and partition, the source's types mapped.
            try await Self.waitFor("countries", version: 1, in: store)
            #expect(try await Self.export("countries", from: store) == """
                {"area":468.76,"code":"AD","flag":"AQI=","founded":"1278-09-08T00:00:00Z","id":"AD","meta":{"x":1},"name":"Andorra","ok":true,"population":77000,"tags":["a","b c"]}
                {"area":null,"code":"FR","flag":null,"founded":null,"id":"FR","meta":null,"name":"France","ok":null,"population":null,"tags":null}

                """)
            #expect(try await Self.export("attempts/alice", from: store) == #"{"id":"1","score":3,"user_id":"alice"}"# + "\n")

            // One transaction over two partitions and a collection: visible together.
            try await source.transaction([
                "INSERT INTO attempts VALUES ('alice', 2, 9)", "UPDATE attempts SET score = 6 WHERE user_id = 'bob'",
                "UPDATE countries SET population = 77001 WHERE code = 'AD'",
            ])
            try await Self.waitFor("attempts/alice", version: 2, in: store)
            #expect(try await store.head(of: "attempts/bob")?.version == 2)
            #expect(try await store.head(of: "countries")?.version == 2)

            // A rolled-back transaction never appears; the next one does.
            try await source.transaction(["INSERT INTO countries(code) VALUES ('ZZ')"], rollback: true)
            try await source.run("INSERT INTO countries(code, area) VALUES ('MK', 12345678901234567890.123456789)")
            try await Self.waitFor("countries", version: 3, in: store)
            let afterInsert = try await Self.export("countries", from: store)
            #expect(!afterInsert.contains(#""ZZ""#))
            #expect(afterInsert.contains(#""area":12345678901234567890.123456789"#))

            // A row moving between partitions leaves one and joins the other in one version each.
            try await source.transaction(["UPDATE attempts SET user_id = 'carol' WHERE user_id = 'alice' AND id = 1", "DELETE FROM countries WHERE code = 'FR'"])
            try await Self.waitFor("attempts/carol", version: 1, in: store)
            #expect(try await Self.export("attempts/alice", from: store) == #"{"id":"2","score":9,"user_id":"alice"}"# + "\n")
            #expect(try await store.head(of: "attempts/alice")?.version == 3)
            #expect(try await store.head(of: "countries")?.count == 2)

            // TRUNCATE hides every partition's rows, but those written after it.
            try await source.transaction(["TRUNCATE attempts", "INSERT INTO attempts VALUES ('dave', 1, 1)"])
            try await Self.waitFor("attempts/dave", version: 1, in: store)
            for partition in ["attempts/alice", "attempts/bob", "attempts/carol"] {
                #expect(try await store.head(of: partition)?.count == 0, "\(partition)")
            }
            #expect(try await store.partitions(of: "attempts") == ["attempts/alice", "attempts/bob", "attempts/carol", "attempts/dave"])

            // A large value an update leaves alone is not sent (TOAST): the record keeps it.
            try await source.run("ALTER TABLE countries ADD COLUMN notes text")
            try await source.run("ALTER TABLE countries ALTER COLUMN notes SET STORAGE EXTERNAL")
            let long = String(repeating: "Andorra la Vella. ", count: 2_000)
            let withNotes = try #require(try await store.head(of: "countries")).version
            try await source.run("UPDATE countries SET notes = '\(long)' WHERE code = 'AD'")
            try await Self.waitFor("countries", version: withNotes + 1, in: store)
            try await source.run("UPDATE countries SET population = 80000 WHERE code = 'AD'")
            try await Self.waitFor("countries", version: withNotes + 2, in: store)
            #expect(try #require(try await store.record("AD", in: "countries")).text.contains(long))
            // …also when the row changes twice in one transaction without it.
            try await source.transaction(["UPDATE countries SET population = 80001 WHERE code = 'AD'", "UPDATE countries SET name = 'Andorra!' WHERE code = 'AD'"])
            try await Self.waitFor("countries", version: withNotes + 3, in: store)
            let andorra = try #require(try await store.record("AD", in: "countries")).text
            #expect(andorra.contains(#""name":"Andorra!""#) && andorra.contains(#""population":80001"#) && andorra.contains(long), "\(andorra.prefix(300))")
            try await source.run("ALTER TABLE countries DROP COLUMN notes")

            // Columns added and dropped reach every record in one version.
            try await source.run("ALTER TABLE countries ADD COLUMN continent text DEFAULT 'EU'")
            try await source.run("ALTER TABLE countries DROP COLUMN tags")
            let before = try #require(try await store.head(of: "countries")).version
            try await source.run("INSERT INTO countries(code, name) VALUES ('IT', 'Italy')")
            try await Self.waitFor("countries", version: before + 1, in: store)
            let reshaped = try await Self.export("countries", from: store)
            #expect(reshaped.split(separator: "\n").count == 3)
            #expect(reshaped.split(separator: "\n").allSatisfy { $0.contains(#""continent":"EU""#) && !$0.contains(#""tags""#) }, "\(reshaped)")
            #expect(try await store.head(of: "countries")?.version == before + 1)

            // A table taken out of the publication is said to be no longer followed, once.
            try await source.run("ALTER PUBLICATION deltasnap DROP TABLE attempts")
            var said: [String] = []
            for _ in 0..<100 where said.isEmpty {
                try await Task.sleep(for: .milliseconds(50))
                said = logs.withLock { $0 }.map(\.message).filter { $0.contains("public.attempts is no longer in publication deltasnap") }
            }
            // A negative check: the follower's next checks must not say it again — fenced by a
            // later transaction it applies, not by a sleep.
            let fenced = try #require(try await store.head(of: "countries")).version + 1
            try await source.run("INSERT INTO countries(code, name) VALUES ('FR', 'France')")
            try await Self.waitFor("countries", version: fenced, in: store)
            #expect(logs.withLock { $0 }.filter { $0.message.contains("public.attempts is no longer in publication") }.count == 1)
        }
    }

    /// A transaction larger than `spillRows` is staged in a file, not held: still one version
    /// of each path it touched, a row changed twice is its last state, a row leaving a
    /// partition is hidden there, a TOASTed value it left alone is kept, and a `TRUNCATE`
    /// hides what came before it.
    /// docs/PROTOCOL.md §13: a followed table whose collection is reviewed publishes nothing by
    /// itself: the copy and each source transaction go to the workspace (partitions too), and
    /// an approval publishes them.
    @Test(arguments: TestBackend.allCases) func aReviewedCollectionsChangesGoToItsWorkspace(_ backend: TestBackend) async throws {
        let review = ReviewSettings(editors: "editor", reviewers: "reviewer")
        try await withFollower(backend, reviewed: ["countries": review, "attempts": review]) { source, store in
            try await Self.waitFor(ReviewPaths.workspace(of: "countries"), version: 1, in: store)
            try await Self.waitFor(ReviewPaths.workspace(of: "attempts/alice"), version: 1, in: store)
            #expect(try await store.head(of: "countries") == nil, "nothing published by the copy")
            // The console's health lists the follower, with its last publication.
            let followers = try await store.followers()
            #expect(followers.map(\.follower) == ["postgres-slot:deltasnap"] && followers[0].recordedAt > 0, "\(followers)")
            // And how far the source's log ran ahead of it, as it measures every check.
            var measured = followers.first?.lagBytes
            for _ in 0..<100 where measured == nil {
                try await Task.sleep(for: .milliseconds(50))
                measured = try await store.followers().first?.lagBytes
            }
            #expect(measured.map { $0 >= 0 } == true, "the follower noted no lag in the store")
            #expect(try await store.head(of: "attempts/alice") == nil)
            try await source.run("UPDATE countries SET population = 77001 WHERE code = 'AD'")
            try await Self.waitFor(ReviewPaths.workspace(of: "countries"), version: 2, in: store)
            _ = try await store.requestReview(of: "countries", by: "ed", comment: nil)
            let approved = try await store.approveReview(of: "countries", by: "rev", comment: nil)
            #expect(approved.changes == 2)
            #expect(try await Self.export("countries", from: store).contains(#""population":77001"#))
            // The next change waits in the workspace again.
            try await source.run("UPDATE countries SET name = 'France!' WHERE code = 'FR'")
            try await Self.waitFor(ReviewPaths.workspace(of: "countries"), version: 3, in: store)
            #expect(try await store.head(of: "countries")?.version == 1)
            #expect(try await store.reviewChanges(of: "countries", after: nil, limit: 10).changes.map(\.id) == ["FR"])
        }
    }

    @Test(arguments: TestBackend.allCases) func aTransactionLargerThanMemoryIsStagedAndStillOneVersion(_ backend: TestBackend) async throws {
        let logs = CapturingLogHandler.Lines([])
        try await withFollower(backend, logs: logs, spillRows: 100) { source, store in
            try await Self.waitFor("countries", version: 1, in: store)
            try await source.run("ALTER TABLE countries ADD COLUMN notes text")
            try await source.run("ALTER TABLE countries ALTER COLUMN notes SET STORAGE EXTERNAL")
            let long = String(repeating: "Andorra la Vella. ", count: 2_000)
            try await source.run("UPDATE countries SET notes = '\(long)' WHERE code = 'AD'")
            try await Self.waitFor("countries", version: 2, in: store)

            try await source.transaction([
                "INSERT INTO attempts SELECT CASE WHEN n % 2 = 0 THEN 'erin' ELSE 'alice' END, n + 10, n FROM generate_series(1, 400) AS n",
                "UPDATE attempts SET score = -score WHERE user_id = 'erin' AND id <= 60",
                "UPDATE attempts SET score = score * 10 WHERE user_id = 'erin' AND id <= 30",
                "DELETE FROM attempts WHERE user_id = 'alice' AND id = 11",
                "UPDATE attempts SET user_id = 'frank' WHERE user_id = 'bob'",
                "UPDATE countries SET population = 78000 WHERE code = 'AD'",
            ])
            try await Self.waitFor("attempts/erin", version: 1, in: store)
            #expect(logs.withLock { $0 }.contains { $0.message.contains("staged in a temporary file") })
            #expect(try await store.head(of: "attempts/alice")?.version == 2)
            #expect(try await store.head(of: "attempts/bob")?.version == 2)
            #expect(try await store.head(of: "attempts/frank")?.version == 1)
            #expect(try await store.head(of: "countries")?.version == 3)
            // Alice: her first attempt and 199 new ones, less the one deleted.
            #expect(try await store.head(of: "attempts/alice")?.count == 200)
            #expect(try await store.head(of: "attempts/erin")?.count == 200)
            #expect(try await store.head(of: "attempts/bob")?.count == 0)
            #expect(try await store.record("11", in: "attempts/alice") == nil)
            #expect(try #require(try await store.record("12", in: "attempts/erin")).text == #"{"id":"12","score":-20,"user_id":"erin"}"#)
            #expect(try #require(try await store.record("42", in: "attempts/erin")).text == #"{"id":"42","score":-32,"user_id":"erin"}"#)
            #expect(try #require(try await store.record("1", in: "attempts/frank")).text == #"{"id":"1","score":5,"user_id":"frank"}"#)
            let andorra = try #require(try await store.record("AD", in: "countries")).text
            #expect(andorra.contains(#""population":78000"#) && andorra.contains(long), "\(andorra.prefix(200))")

            // A TRUNCATE inside a large transaction hides what it did not write again.
            try await source.transaction([
                "TRUNCATE attempts",
                "INSERT INTO attempts SELECT 'gina', n, n FROM generate_series(1, 150) AS n",
                "INSERT INTO attempts VALUES ('alice', 12, 1)",
            ])
            try await Self.waitFor("attempts/gina", version: 1, in: store)
            #expect(try await store.head(of: "attempts/erin")?.count == 0)
            #expect(try await store.head(of: "attempts/erin")?.version == 2)
            #expect(try await store.head(of: "attempts/alice")?.count == 1)
            #expect(try await store.head(of: "attempts/gina")?.count == 150)
        }
    }
}
