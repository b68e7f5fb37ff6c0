import DeltaSnapSQLiteStore
import DeltaSnapTestSupport
import Testing

/// `deltasnap compact` as a script runs it: what it prints, what it refuses, exit codes.
@Suite struct CompactCommandTests {
    @Test func theVerbSaysWhatItDidAndRefusesWhatItCannot() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let store = try SQLiteDatabase(path: db)
        try Fixtures.importText(Fixtures.ndjson(0..<3), into: store, collection: "items")
        try Fixtures.importText(#"{"id":"r0000001","hidden":true}"#, into: store, collection: "items")

        // Everything here is minutes old: nothing is older than a day.
        let recent = try await CLI.run(["compact", "--db", db, "--collection", "items", "--older-than", "1"])
        #expect(recent.status == 0 && recent.stdout.contains("nothing to compact"), "\(recent.stdout)\(recent.stderr)")
        #expect(try store.head(of: "items")?.floor == 0)

        for arguments in [
            ["--collection", "items"],
            ["--collection", "items", "--keep-versions", "1", "--older-than", "2"],
            ["--collection", "items", "--keep-versions", "-1"],
        ] {
            let refused = try await CLI.run(["compact", "--db", db] + arguments)
            #expect(refused.status != 0, "\(arguments)")
            #expect(!refused.stderr.isEmpty, "\(arguments)")
        }
        let unknown = try await CLI.run(["compact", "--db", db, "--collection", "nope", "--keep-versions", "1"])
        #expect(unknown.status == 1 && unknown.stderr.contains("does not exist") && unknown.stderr.split(separator: "\n").count == 1)

        let all = try await CLI.run(["compact", "--db", db, "--collection", "items", "--keep-versions", "0"])
        #expect(all.status == 0 && all.stdout.contains("to 2; 1 tombstone removed"), "\(all.stdout)")
        #expect(try Fixtures.export(store, "items") == Fixtures.export(try SQLiteDatabase(path: db), "items"))
    }
}
