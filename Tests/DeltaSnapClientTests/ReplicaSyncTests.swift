import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import Foundation
import Testing

/// The client against a real server on 127.0.0.1 and real SQLite files.
@Suite struct ReplicaSyncTests {

    @Test func bundledSnapshotIsUsableOfflineAtFirstStart() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<100), into: store, collection: "items")
        try await Fixtures.bake(store.path, "items", into: dir.path)
        // Nothing listens on port 9: no server is reachable.
        let replica = try DeltaSnapReplica(
            path: dir.file("r.sqlite"), collection: "items", url: URL(string: "http://127.0.0.1:9/v1/collections/items")!,
            bundledSnapshot: dir.file("items.snapshot"), timeout: .seconds(2))
        #expect(await replica.count == 100)
        #expect(try await replica.record(id: "r0000042")?["id"] == .string("r0000042"))
        #expect(try await replica.verify())
        #expect(await replica.status == .neverSynced)
        let outcome = await replica.sync()
        guard case .failed = outcome else { Issue.record("expected a failure, got \(outcome)"); return }
        #expect(await replica.count == 100)
        #expect(await replica.status == .retrying)
        #expect(try Fixtures.dumpReplica(dir.file("r.sqlite")) == Fixtures.export(store, "items"))
    }

    @Test func deltaNotModifiedHideUnhideAndFullReplace() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<50), into: store, collection: "items")
        let server = try await TestServer.start(database: dir.file("s.sqlite"))
        let url = URL(string: "\(server.baseURL)/v1/collections/items")!
        let replica = try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: url)
        let changes = await replica.outcomes()

        guard case .applied(let first) = await replica.sync(), first.kind == .full else { Issue.record("first sync not full"); return }
        #expect(await replica.sync() == .notModified)

        try Fixtures.importText(#"{"id":"r0000001","hidden":true}"# + "\n" + #"{"id":"new","v":1}"#, into: store, collection: "items")
        try await waitForToken(server, store)
        guard case .applied(let delta) = await replica.sync() else { Issue.record("no delta"); return }
        #expect(delta.kind == .delta && Set(delta.changedIDs) == ["r0000001", "new"])
        #expect(try await replica.record(id: "r0000001") == nil)
        // Un-hide: the full record comes back.
        try Fixtures.importText(#"{"id":"r0000001","back":true}"#, into: store, collection: "items")
        try await waitForToken(server, store)
        #expect(await replica.sync().name == "delta")
        #expect(try await replica.record(id: "r0000001")?["back"] == .bool(true))
        #expect(try Fixtures.dumpReplica(dir.file("r.sqlite")) == Fixtures.export(store, "items"))

        // A full replace on the server (a different store: another epoch) removes what it lacks.
        await server.stop()
        let other = try SQLiteDatabase(path: dir.file("other.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(10..<20), into: other, collection: "items")
        let otherServer = try await TestServer.start(database: dir.file("other.sqlite"))
        let replica2 = try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: URL(string: "\(otherServer.baseURL)/v1/collections/items")!)
        guard case .applied(let full) = await replica2.sync(), full.kind == .full else { Issue.record("expected a full body"); return }
        #expect(await replica2.count == 10)
        #expect(try Fixtures.dumpReplica(dir.file("r.sqlite")) == Fixtures.export(other, "items"))
        #expect(try await replica2.verify())
        await otherServer.stop()

        var seen: [String] = []
        for await outcome in changes {
            seen.append(outcome.name)
            if seen.count == 4 { break }
        }
        #expect(seen == ["full", "not-modified", "delta", "delta"])
    }

    @Test(.timeLimit(.minutes(2)))
    func randomImportsAndSyncsEndWithDumpEqualToExport() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<30), into: store, collection: "items")
        let server = try await TestServer.start(database: dir.file("s.sqlite"))
        let replica = try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!)
        var random = SplitMix64(seed: 11)
        let generator = SyntheticRecords(seed: 5)
        for round in 0..<15 {
            for _ in 0..<Int(random.next() % 3) {
                var lines: [String] = []
                var ids = Set<Int>()
                for _ in 0..<Int(random.next() % 12 + 1) {
                    let index = Int(random.next() % 45)
                    guard ids.insert(index).inserted else { continue }
                    lines.append(random.next() % 3 == 0
                        ? #"{"id":"\#(SyntheticRecords.id(index))","hidden":true}"#
                        : String(decoding: generator.json(index: index, revision: Int(random.next() % 4)), as: UTF8.self))
                }
                try Fixtures.importText(lines.joined(separator: "\n"), into: store, collection: "items", replace: round == 9)
            }
            try await waitForToken(server, store)
            let outcome = await replica.sync()
            if case .failed(let reason, _) = outcome { Issue.record("round \(round): \(reason)") }
            if case .deferred = outcome { Issue.record("round \(round): deferred") }
            #expect(try Fixtures.dumpReplica(dir.file("r.sqlite")) == Fixtures.export(store, "items"), "round \(round)")
            #expect(await replica.token == (try store.head(of: "items"))?.token.description)
        }
        // The CLI's dump prints the same bytes as the server's export.
        let cliDump = try await offPool { try CLI.runBlocking(["dump", "--replica", dir.file("r.sqlite")]) }
        let cliExport = try await offPool { try CLI.runBlocking(["export", "--db", dir.file("s.sqlite"), "--collection", "items"]) }
        #expect(cliDump.status == 0 && cliDump.stdoutBytes == cliExport.stdoutBytes)
        await server.stop()
    }
}

/// Waits (bounded) until the server serves the store's head token.
func waitForToken(_ server: TestServer, _ store: SQLiteDatabase, collection: String = "items") async throws {
    let token = try #require(try store.head(of: collection)).token.description
    let served = try await eventually(within: .seconds(4)) {
        try await offPool { try server.connect().request("HEAD", "/v1/collections/\(collection)") }.header("ETag") == "\"\(token)\""
    }
    if !served { Issue.record("the server never served \(token)") }
}
