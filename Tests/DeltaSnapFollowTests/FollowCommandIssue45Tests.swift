import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTestSupport
import Foundation
import Testing

/// Issue 45 point 12: `deltasnap follow` stops cleanly on SIGTERM and on SIGINT — also when
/// started from a script with SIGINT ignored (`deltasnap follow … &`) — and says so.
extension FollowCommandTests {
    @Test func aFollowerStopsCleanlyOnSIGTERMAndOnSIGINTEvenWhenStartedWithItIgnored() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = try await SourceDatabase.start(in: dir)
        defer { Task { await source.stop() } }
        try await source.run("CREATE TABLE items(id int PRIMARY KEY, v int)")
        try await source.run("INSERT INTO items VALUES (1, 1)")
        let db = dir.file("s.sqlite")
        let arguments = ["--source", source.url, "--db", db, "--table", "items"]

        let first = try Follower(arguments + ["--create"], output: dir.file("a.log"))
        try await first.waitFor("copy: ")
        await #expect(first.kill(SIGTERM) == 0, "\(first.text)")
        #expect(first.text.contains("stopped on SIGTERM") && first.text.contains("--drop-slot"), "\(first.text)")

        // As a script's background job: SIGINT ignored before exec.
        let quoted = ([CLI.binary, "follow"] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let second = try Follower(["-c", "trap '' INT; exec \(quoted)"], output: dir.file("b.log"), command: [], executable: "/bin/sh")
        try await source.run("INSERT INTO items VALUES (2, 2)")
        try await second.waitFor("items: version 2")
        await #expect(second.kill(SIGINT) == 0, "\(second.text)")
        #expect(second.text.contains("stopped on SIGINT"), "\(second.text)")
    }

    /// The source shut down under a running follower: it ends on its own with one line
    /// naming the source, rather than sitting without a socket forever (PostgresNIO drops a
    /// query sent on a closed connection with the promise its caller awaits; five of six such
    /// stops hung before ``SourceLoss``), and a stop signal sent then still ends it.
    @Test func aFollowerWhoseSourceShutsDownEndsWithOneLine() async throws {
        for signalAfterStop in [false, true] {
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let source = try await SourceDatabase.start(in: dir)
            try await source.run("CREATE TABLE items(id int PRIMARY KEY, v int)")
            try await source.run("INSERT INTO items VALUES (1, 1)")
            let follower = try Follower(
                ["--source", source.url, "--db", dir.file("s.sqlite"), "--table", "items", "--create"], output: dir.file("f.log"))
            defer { follower.killNow() }
            try await follower.waitFor("copy: ")
            try await source.run("INSERT INTO items VALUES (2, 2)")
            try await follower.waitFor("items: version 2")
            await source.stop()
            if signalAfterStop { follower.process.signal(SIGTERM) }
            let status = await follower.process.wait(atMost: 20)
            #expect(!follower.process.wasKilled, "still running 20 s after its source stopped: \(follower.text)")
            let lastLine = follower.text.split(separator: "\n").last.map(String.init) ?? ""
            if signalAfterStop {
                #expect(status == 0 || (status == 1 && lastLine.contains("the source")), "\(status): \(follower.text)")
            } else {
                #expect(status == 1 && lastLine.hasPrefix("deltasnap: ") && lastLine.contains("the source"), "\(status): \(follower.text)")
            }
        }
    }

    /// Issue 45 point 11: a role without REPLICATION is refused before anything is published
    /// (here the slot and the publication exist, made by an administrator: the copy used to be
    /// published, then the stream refused).
    @Test func aRoleWithoutReplicationIsRefusedBeforeAnythingIsWritten() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = try await SourceDatabase.start(in: dir)
        defer { Task { await source.stop() } }
        try await source.run("CREATE TABLE items(id int PRIMARY KEY, v int)")
        try await source.run("INSERT INTO items VALUES (1, 1)")
        try await source.run("CREATE ROLE norep LOGIN")
        try await source.run("GRANT SELECT ON items TO norep")
        try await source.run("CREATE PUBLICATION deltasnap FOR TABLE items")
        try await source.run("SELECT pg_create_logical_replication_slot('deltasnap', 'pgoutput')")
        let db = dir.file("s.sqlite")
        let url = source.url.replacingOccurrences(of: "postgres://deltasnap@", with: "postgres://norep@")
        let refused = try await CLI.run(["follow", "--source", url, "--db", db, "--table", "items"])
        let said = refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(refused.status == 1 && said.contains("REPLICATION") && !said.contains("\n"), "\(refused.stderr)")
        let store = try await StoreLocation(db).open(configuration: StoreConfiguration())
        #expect(try await store.head(of: "items") == nil)
        await store.close()
    }

    /// Issue 45 point 10: a value maps the same copied or streamed (`char(n)` keeps its
    /// padding, `inet` has no mask it does not show).
    @Test func theCopyAndTheStreamMapAValueTheSameWay() async throws {
        let (copied, streamed) = try await Self.copiedAndStreamed(
            table: "t", creating: ["CREATE TABLE t(id int PRIMARY KEY, c char(5), a inet, n inet, e char(3))"], values: "'ab', '::1', '10.1.0.0/16', NULL")
        #expect(copied.replacingOccurrences(of: #""id":"1""#, with: #""id":"2""#) == streamed, "\(copied) \(streamed)")
        #expect(streamed.contains(#""c":"ab   ""#) && streamed.contains(#""a":"::1""#) && streamed.contains(#""e":null"#), "\(streamed)")
    }
}
