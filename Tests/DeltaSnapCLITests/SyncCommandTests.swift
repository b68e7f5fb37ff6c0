import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// `deltasnap local`, `pending`, `sync`, `history` and `token` as scripts drive them, against
/// a `deltasnap serve` child process.
@Suite struct SyncCommandTests {
    static let secret = "cli-test-secret"

    @Test(.timeLimit(.minutes(2)))
    func twoReplicasEditOfflineAndConvergeThroughTheCLI() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try Fixtures.importText(#"{"body":"x","id":"n1","title":"a"}"# + "\n" + #"{"id":"n2","title":"b"}"#, into: try SQLiteDatabase(path: db), collection: "notes")
        let server = try await offPool { try ServeProcess.start(["--db", db, "--jwt-secret", Self.secret]) }
        defer { server.stop() }
        let url = "\(server.collectionsURL)/notes"
        let token = try await offPool { try CLI.runBlocking(["token", "--secret", Self.secret, "--subject", "alice", "--write", "notes", "--expires-in", "600"]) }
        #expect(token.status == 0 && token.stdout.split(separator: ".").count == 3, "\(token.stderr)")
        let jwt = token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let a = dir.file("a.sqlite")
        let b = dir.file("b.sqlite")
        func run(_ arguments: [String]) async throws -> CLI.Result { try await offPool { try CLI.runBlocking(arguments) } }

        for replica in [a, b] { #expect(try await run(["pull", "--url", url, "--replica", replica]).status == 0) }
        #expect(try await run(["pending", "--replica", a]).stdout.isEmpty)
        #expect(try await run(["local", "patch", "--replica", a, "n1", #"{"title":"A"}"#]).stdout == "queued patch n1 (seq 1)\n")
        #expect(try await run(["local", "patch", "--replica", b, "n1", #"{"body":"B"}"#]).status == 0)
        #expect(try await run(["local", "insert", "--replica", a, "q1", #"{"v":1}"#]).status == 0)
        #expect(try await run(["local", "insert", "--replica", b, "q1", "-"]).status != 0)  // empty stdin: not JSON
        #expect(try await run(["local", "delete", "--replica", b, "n2"]).status == 0)
        let refusedLocally = try await run(["local", "insert", "--replica", a, "n1", "{}"])
        #expect(refusedLocally.status == 1 && refusedLocally.stderr.hasPrefix("deltasnap: exists:"), "\(refusedLocally.stderr)")
        #expect(try await run(["pending", "--replica", a]).stdout == "1 patch n1 {\"title\":\"A\"}\n2 insert q1 {\"v\":1}\n")

        let first = try await run(["sync", "--url", url, "--replica", a, "--token", jwt])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.hasPrefix("pushed 2\nrefused 0\npulled: delta "), "\(first.stdout)")
        let second = try await run(["sync", "--url", url, "--replica", b, "--token", jwt])
        #expect(second.stdout.hasPrefix("pushed 2\nrefused 0\npulled: delta "), "\(second.stdout)")
        _ = try await run(["sync", "--url", url, "--replica", a, "--token", jwt])
        let export = try await run(["export", "--db", db, "--collection", "notes"]).stdout
        #expect(export.contains(#"{"body":"B","id":"n1","title":"A"}"#) && !export.contains(#""id":"n2""#))
        #expect(try await run(["dump", "--replica", a]).stdout == export)
        #expect(try await run(["dump", "--replica", b]).stdout == export)
        #expect(try await run(["pending", "--replica", b]).stdout.isEmpty)

        let history = try await run(["history", "--url", url, "n1"])
        let lines = history.stdout.split(separator: "\n")
        #expect(lines.count == 2 && lines[0].contains(#""value":{"body":"x","id":"n1","title":"A"}"#), "\(history.stdout)")

        // Without a valid token the writes stay queued, and the reason is on its own line.
        _ = try await run(["local", "put", "--replica", a, "n3", "{}"])
        let unauthorized = try await run(["sync", "--url", url, "--replica", a])
        #expect(unauthorized.stdout.contains("push failed: status 401"), "\(unauthorized.stdout)")
        #expect(!unauthorized.stdout.contains("push failed: push"), "\(unauthorized.stdout)")
        #expect(unauthorized.status == 1, "a refused push (no token) is an error: \(unauthorized.stderr)")
        #expect(try await run(["pending", "--replica", a]).stdout.hasPrefix("3 put n3"))
        // A batch from a file: all or none, a bad line named FILE:LINE.
        try Data("{\"id\":\"f1\"}\nnot json\n".utf8).write(to: URL(fileURLWithPath: dir.file("bad.ndjson")))
        let bad = try await run(["local", "insert", "--replica", a, "--file", dir.file("bad.ndjson")])
        #expect(bad.status == 1 && bad.stderr.contains("bad.ndjson:2"), "\(bad.stderr)")
        try Data("{\"id\":\"f1\"}\n{\"id\":\"f2\",\"x\":1}\n".utf8).write(to: URL(fileURLWithPath: dir.file("good.ndjson")))
        #expect(try await run(["local", "insert", "--replica", a, "--file", dir.file("good.ndjson")]).stdout == "queued 2 inserts (seq 4…5)\n")
        let drained = try await run(["sync", "--url", url, "--replica", a, "--token", jwt])
        #expect(drained.stdout.hasPrefix("pushed 3\nrefused 0\n"), "\(drained.stdout)")
    }

    /// SIGKILL `deltasnap sync` at random moments while writes keep being queued: in the end
    /// the server holds every write exactly once and nothing queued is lost.
    @Test(.timeLimit(.minutes(5)))
    func killingSyncAtRandomMomentsLosesNothingAndAppliesNothingTwice() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try Fixtures.importText(#"{"id":"seed"}"#, into: try SQLiteDatabase(path: db), collection: "notes")
        let server = try await TestServer.start(database: db)
        let url = "\(server.baseURL)/v1/collections/notes"
        let replica = dir.file("r.sqlite")
        let environment = ["TMPDIR": dir.path]
        let sync = ["sync", "--url", url, "--replica", replica, "--token", TestServer.writeToken]
        _ = try await offPool { try CLI.runBlocking(["pull", "--url", url, "--replica", replica], environment: environment) }

        var queued = 0
        func queueRound(_ round: Int) async throws {
            let lines = (0..<120).map { #"{"id":"r\#(round)-\#($0)","n":\#($0)}"# }.joined(separator: "\n")
            try Data(lines.utf8).write(to: URL(fileURLWithPath: dir.file("round.ndjson")))
            let result = try await offPool { try CLI.runBlocking(["local", "insert", "--replica", replica, "--file", dir.file("round.ndjson")], environment: environment) }
            #expect(result.status == 0, "\(result.stderr)")
            queued += 120
        }
        try await queueRound(0)
        let started = Date()
        _ = try await offPool { try CLI.runBlocking(sync, environment: environment) }
        let syncSeconds = Date().timeIntervalSince(started)

        var kills = 0
        var attempt = 0
        // Load on the machine makes sync times vary widely: the kill window shrinks whenever a
        // sync finished before it and grows back slowly, so most runs die somewhere inside.
        var window = syncSeconds * 1.2
        while kills < 20 && attempt < 150 {
            attempt += 1
            try await queueRound(attempt)
            let delay = attempt % 5 == 0 ? nil : Double.random(in: 0.005...max(0.01, window))
            let killed = try await CLI.runAndKill(sync, after: delay, environment: environment)
            if killed {
                kills += 1
                window *= 1.1
            } else if delay != nil {
                window *= 0.6
            }
            // Whatever the moment, the replica opens and its server state verifies.
            let opened = try DeltaSnapReplica(path: replica, collection: "notes", url: URL(string: url)!)
            #expect(try await opened.verify(), "attempt \(attempt)")
        }
        #expect(kills >= 20, "only \(kills) syncs were killed mid-way")
        for _ in 0..<20 {
            _ = try await offPool { try CLI.runBlocking(sync, environment: environment) }
            if try await offPool({ try CLI.runBlocking(["pending", "--replica", replica, "--all"]) }).stdout.isEmpty { break }
        }
        #expect(try await offPool { try CLI.runBlocking(["pending", "--replica", replica, "--all"]) }.stdout.isEmpty)

        // Exactly once: every write number has one result, an applied one. A create-only insert
        // applied twice would have been refused ("exists").
        let ledger = try SQLiteConnection(path: db)
        #expect(try ledger.scalarInt("SELECT count(*) FROM push_results WHERE error IS NOT NULL") == 0)
        #expect(try ledger.scalarInt("SELECT count(*) FROM push_results WHERE error IS NULL") == Int64(queued))
        #expect(try ledger.scalarInt("SELECT last_seq FROM push_clients") == Int64(queued))
        let store = try SQLiteDatabase(path: db)
        #expect(try store.head(of: "notes")?.count == 1 + queued)
        let dump = try await offPool { try CLI.runBlocking(["dump", "--replica", replica]) }
        #expect(dump.stdout == (try Fixtures.export(store, "notes")))
        await server.stop()
    }
}
