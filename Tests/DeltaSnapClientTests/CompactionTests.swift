import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// `deltasnap compact`: tombstones go, the floor rises, and a client that slept past it gets
/// a full body on every path — never a delta that silently misses a delete, cached or not.
@Suite struct CompactionTests {
    func kind(_ response: RawHTTPClient.Response) throws -> BodyKind {
        try BodyReader(bytes: try response.decodedBody()).readHeader().kind
    }

    @Test func aClientBelowTheFloorGetsAFullBodyAndConverges() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let store = try SQLiteDatabase(path: db)
        try Fixtures.importText(Fixtures.ndjson(0..<10), into: store, collection: "items")
        let server = try await TestServer.start(database: db)
        let url = URL(string: "\(server.baseURL)/v1/collections/items")!
        let sleeper = try DeltaSnapReplica(path: dir.file("sleeper.sqlite"), collection: "items", url: url)
        #expect(await sleeper.sync().name == "full")
        let oldETag = try #require(await sleeper.currentState.etag)

        try Fixtures.importText(#"{"id":"r0000002","hidden":true}"#, into: store, collection: "items")
        try Fixtures.importText(#"{"id":"r0000003","v":3}"#, into: store, collection: "items")
        try await waitForToken(server, store)
        let recent = try DeltaSnapReplica(path: dir.file("recent.sqlite"), collection: "items", url: url)
        #expect(await recent.sync().name == "full")
        try Fixtures.importText(#"{"id":"r0000004","hidden":true}"#, into: store, collection: "items")
        try await waitForToken(server, store)

        // Before compaction the sleeper's token gets a delta, which the server now caches.
        for _ in 0..<2 {
            let delta = try await offPool { try server.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": oldETag, "Accept-Encoding": "gzip"]) }
            #expect(try delta.status == 200 && kind(delta) == .delta)
        }

        let compact = try await CLI.run(["compact", "--db", db, "--collection", "items", "--keep-versions", "1"])
        #expect(compact.status == 0, "\(compact.stderr)")
        #expect(compact.stdout == "items: floor raised from version 0 to 3; 1 tombstone removed; tokens below version 3 now get a full body\n")
        #expect(try store.head(of: "items")?.floor == 3)

        // Every path — raw bytes, after NIO's decoder, the router — answers below the floor
        // with a full body, even though the old delta is still in the cache.
        var answered: BodyKind?
        for _ in 0..<100 {
            let response = try await offPool { try server.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": oldETag, "Accept-Encoding": "gzip"]) }
            answered = try kind(response)
            if answered == .full { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(answered == .full)
        let routed = try await offPool { try server.connect().request("GET", "/v1/collections/items?via=router", headers: ["If-None-Match": oldETag]) }
        #expect(try kind(routed) == .full)

        // Both clients converge on the server's state.
        #expect(await sleeper.sync().name == "full")
        #expect(await recent.sync().name == "delta")
        let export = try Fixtures.export(store, "items")
        #expect(try Fixtures.dumpReplica(dir.file("sleeper.sqlite")) == export)
        #expect(try Fixtures.dumpReplica(dir.file("recent.sqlite")) == export)
        #expect(try await sleeper.verify())
        #expect(try await recent.verify())
        await server.stop()
    }

    @Test func theServerCompactsOnItsSchedule() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let store = try SQLiteDatabase(path: db)
        try Fixtures.importText(Fixtures.ndjson(0..<5), into: store, collection: "items")
        let server = try await TestServer.start(
            database: db, compaction: CompactionSchedule(policy: .keepVersions(1), interval: .milliseconds(50)))
        let oldETag = try #require(try await offPool { try server.connect().request("GET", "/v1/collections/items") }.header("ETag"))
        try Fixtures.importText(#"{"id":"r0000001","hidden":true}"#, into: store, collection: "items")
        try Fixtures.importText(#"{"id":"r0000002","hidden":true}"#, into: store, collection: "items")
        var floor: UInt64 = 0
        for _ in 0..<100 where floor < 2 {
            try await Task.sleep(for: .milliseconds(20))
            floor = try store.head(of: "items")?.floor ?? 0
        }
        #expect(floor == 2)
        var kind: BodyKind?
        for _ in 0..<100 where kind != .full {
            let response = try await offPool { try server.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": oldETag]) }
            // A 304 until the server's watcher has seen the imports (the compaction, which the
            // store already shows, can come first).
            kind = response.status == 304 ? nil : try self.kind(response)
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(kind == .full)
        await server.stop()
    }
}
