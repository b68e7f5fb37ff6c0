import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Guarantee 5: `kill -9` at any instant leaves the old state or the new one.
@Suite struct CrashSafetyTests {
    @Test(.timeLimit(.minutes(5)))
    func killingAPullAtRandomMomentsLeavesTheOldOrTheNewState() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Two stores (two epochs): each pull from the other one is a full body that
        // replaces every record, so every pull has a large apply to interrupt.
        let storeA = try SQLiteDatabase(path: dir.file("a.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<8000, revision: 0), into: storeA, collection: "items")
        let storeB = try SQLiteDatabase(path: dir.file("b.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(4000..<12_000, revision: 1), into: storeB, collection: "items")
        let heads = [try #require(try storeA.head(of: "items")), try #require(try storeB.head(of: "items"))]
        let serverA = try await TestServer.start(database: dir.file("a.sqlite"))
        let serverB = try await TestServer.start(database: dir.file("b.sqlite"))
        let urls = ["\(serverA.baseURL)/v1/collections/items", "\(serverB.baseURL)/v1/collections/items"]
        let replica = dir.file("r.sqlite")
        let environment = ["TMPDIR": dir.path]

        // An uninterrupted pull (a full replace) measures how long one takes on this build.
        _ = try await offPool { try CLI.runBlocking(["pull", "--url", urls[1], "--replica", replica], environment: environment) }
        let started = Date()
        let first = try await offPool { try CLI.runBlocking(["pull", "--url", urls[0], "--replica", replica], environment: environment) }
        #expect(first.status == 0, "\(first.stderr)")
        let pullSeconds = Date().timeIntervalSince(started)

        var kills = 0
        var completed = 0
        var seen = Set<String>()
        var attempt = 0
        // Up to 0.8× a whole pull: process start-up is part of it, and a kill after the end
        // would not test anything. Load on the machine makes pull times vary widely: a pull
        // that ended before its kill lowers the bound (the first one may have been slow).
        var latest = max(0.02, pullSeconds * 0.8)
        // Until 20 pulls were killed mid-way; every fifth pull runs to the end, so the new
        // state is always reached too.
        while kills < 20 && attempt < 300 {
            attempt += 1
            let url = urls[attempt % 2]
            let delay = attempt % 5 == 0 ? nil : Double.random(in: 0.01...latest)
            let killed = try await CLI.runAndKill(["pull", "--url", url, "--replica", replica], after: delay, environment: environment)
            if killed { kills += 1 } else { completed += 1 }
            if !killed, delay != nil { latest = max(0.02, latest * 0.7) }

            // Reopen as an app would: the state must verify and be A's or B's, whole.
            let opened = try DeltaSnapReplica(path: replica, collection: "items", url: URL(string: url)!)
            #expect(try await opened.verify(), "attempt \(attempt)")
            let token = try #require(await opened.token)
            let head = try #require(heads.first { $0.token.description == token }, "unknown token \(token)")
            #expect(await opened.count == head.count)
            #expect(await opened.currentState.checksum == head.checksum)
            seen.insert(token)
        }
        #expect(kills >= 20, "only \(kills) pulls were killed mid-way (\(completed) completed)")
        #expect(completed > 0)
        #expect(seen.count == 2)
        await serverA.stop()
        await serverB.stop()
    }
}
