import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Logging
import Testing

/// The cacheable URLs behind a real shared cache: nginx `proxy_cache` with
/// `proxy_cache_lock`, from Debian's packages, in front of a real server. The origin's own
/// request log is the measure of what reached it.
@Suite(.serialized) struct CDNCacheTests {
    struct Origin: @unchecked Sendable {
        let dir: TemporaryDirectory
        let key: IndexSigningKey
        let port: Int
        let log: CapturingLogHandler.Lines
        var server: TestServer
        let cache: NginxCache

        static let maxAge = 1

        static func start(db: String, dir: TemporaryDirectory) async throws -> Origin {
            let key = IndexSigningKey.generate()
            let port = try NginxCache.freeLoopbackPort()
            let log = CapturingLogHandler.Lines([])
            let server = try await startServer(db: db, port: port, key: key, log: log)
            let cache = try await NginxCache.start(originPort: port, in: dir.path)
            return Origin(dir: dir, key: key, port: port, log: log, server: server, cache: cache)
        }

        static func startServer(db: String, port: Int, key: IndexSigningKey, log: CapturingLogHandler.Lines) async throws -> TestServer {
            var logger = Logger(label: "origin") { _ in CapturingLogHandler(lines: log) }
            logger.logLevel = .info
            return try await TestServer.start(
                database: db, logNotModified: true, logger: logger, port: port, signingKeys: [key], indexMaxAge: maxAge)
        }

        /// GETs the origin answered, in order: the cache's requests (the tests' own direct
        /// checks are HEADs).
        var originRequests: [(path: String, status: String)] {
            log.current.filter { $0.message == "request" && $0.metadata["method"] == "GET" }
                .compactMap { line in line.metadata["path"].map { ($0, line.metadata["status"] ?? "") } }
        }

        func replica(_ name: String) throws -> DeltaSnapReplica {
            try DeltaSnapReplica(
                path: dir.file(name), collection: "items", url: URL(string: "\(cache.baseURL)/v1/collections/items")!,
                retryPolicy: RetryPolicy(), trustedKeys: [key.publicKey])
        }

        func stop() async {
            cache.stop()
            await server.stop()
        }
    }

    /// 1,000 polls by 20 clients across six versions, clients at different bases: the origin
    /// sees a few index requests per max-age and one request per (base, target) pair, and
    /// every client ends on the server's digest.
    @Test func aThousandPollsReachTheOriginOncePerPair() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let store = try SQLiteDatabase(path: db)
        try Fixtures.importText(Fixtures.ndjson(0..<50), into: store, collection: "items")
        let origin = try await Origin.start(db: db, dir: dir)
        let clients = try (0..<20).map { try origin.replica("c\($0).sqlite") }
        let started = ContinuousClock.now
        var polls = 0
        for version in 1...6 {
            if version > 1 {
                try Fixtures.importText(
                    #"{"id":"r\#(String(format: "%07d", version))","hidden":true}"# + "\n" + #"{"id":"v\#(version)","at":\#(version)}"#,
                    into: store, collection: "items")
                try await waitForToken(origin.server, store)
            }
            try await Task.sleep(for: .milliseconds(1100))  // the cached index goes stale
            // Clients 10…19 appear at version 3; every third client skips a version, so
            // bases differ.
            let active = clients.indices.filter { $0 < 10 || version >= 3 }.filter { ($0 + version) % 3 != 0 || version == 6 }
            let perClient = 1000 / 6 / active.count + 1
            polls += await withTaskGroup(of: Int.self) { group in
                for index in active {
                    group.addTask {
                        for _ in 0..<perClient { _ = await clients[index].sync(ignoringBackoff: true) }
                        return perClient
                    }
                }
                return await group.reduce(0, +)
            }
        }
        // Every client catches up (a few more polls at most), then holds the server's state.
        let head = try #require(try store.head(of: "items")).token.description
        let digest = try store.read { try $0.recomputedDigest(of: "items") }
        for client in clients {
            for _ in 0..<5 where await client.token != head {
                try await Task.sleep(for: .milliseconds(300))
                _ = await client.sync(ignoringBackoff: true)
                polls += 1
            }
            #expect(await client.token == head)
            #expect(await client.currentState.digest == digest)
            #expect(try await client.verify())
        }
        let elapsed = ContinuousClock.now - started
        await origin.stop()

        #expect(polls >= 1000)
        let requests = origin.originRequests
        let indexRequests = requests.filter { $0.path == "/v1/index" }.count
        let maxAges = Int(elapsed.components.seconds) / Origin.maxAge + 1
        #expect(indexRequests <= 3 * maxAges, "\(indexRequests) index requests in \(maxAges) max-ages")
        // One request per (base, target) pair and per full body. A client holding a cached
        // index that went stale may ask for a superseded target: a 404 no cache keeps,
        // bounded by the clients that saw the stale index.
        var perPath: [String: Int] = [:]
        for request in requests where request.status != "404" && request.path != "/v1/index" { perPath[request.path, default: 0] += 1 }
        #expect(perPath.values.allSatisfy { $0 == 1 }, "\(perPath.filter { $0.value > 1 })")
        #expect(perPath.keys.contains { $0.contains("/deltas/") })
        #expect(perPath.keys.contains { $0.contains("/snapshots/") })
        #expect(perPath.keys.allSatisfy { $0.contains("/deltas/") || $0.contains("/snapshots/") }, "clients went around the cacheable URLs")
        let superseded = requests.filter { $0.status == "404" }.count
        #expect(superseded <= clients.count * 2)
        print("CDN test: \(polls) polls; the origin saw \(indexRequests) index requests, \(perPath.count) bodies, \(superseded) superseded, in \(elapsed)")
    }

    /// A compaction and an epoch change behind the cache lead to full bodies (a permanent
    /// redirect), never a delta that misses a delete.
    @Test func compactionAndEpochChangeBehindTheCacheLeadToFullBodies() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let store = try SQLiteDatabase(path: db)
        try Fixtures.importText(Fixtures.ndjson(0..<20), into: store, collection: "items")
        var origin = try await Origin.start(db: db, dir: dir)
        let sleeper = try origin.replica("sleeper.sqlite")
        let recent = try origin.replica("recent.sqlite")
        #expect(await sleeper.sync().name == "full")
        try Fixtures.importText(#"{"id":"r0000003","hidden":true}"#, into: store, collection: "items")
        try await waitForToken(origin.server, store)
        #expect(try await converge(recent, to: store).contains("full"))
        try Fixtures.importText(#"{"id":"r0000004","v":4}"#, into: store, collection: "items")
        try await waitForToken(origin.server, store)
        #expect(try await converge(recent, to: store).contains("delta"))  // caches delta(v2 → v3)

        _ = try store.compact("items", throughVersion: .max)
        try await origin.server.waitForFloor(try #require(try store.head(of: "items")).floor, of: "items")
        let outcomes = try await converge(sleeper, to: store)
        #expect(outcomes.contains("full") && !outcomes.contains("delta"), "below the floor: \(outcomes)")
        #expect(try await sleeper.record(id: "r0000003") == nil)
        #expect(try await sleeper.verify())

        // The data owner rebuilds the store (a new epoch) a moment later, with one record fewer.
        await origin.server.stop()
        try await Task.sleep(for: .milliseconds(1100))
        let rebuilt = dir.file("rebuilt.sqlite")
        let fresh = try SQLiteDatabase(path: rebuilt)
        try Fixtures.importText(Fixtures.ndjson(0..<20), into: fresh, collection: "items")
        try Fixtures.importText(#"{"id":"r0000007","hidden":true}"#, into: fresh, collection: "items")
        origin.server = try await Origin.startServer(db: rebuilt, port: origin.port, key: origin.key, log: origin.log)
        for client in [sleeper, recent] {
            let outcomes = try await converge(client, to: fresh)
            #expect(outcomes.contains("full") && !outcomes.contains("delta"), "another epoch: \(outcomes)")
            #expect(try await client.record(id: "r0000007") == nil)
            #expect(await client.currentState.digest == (try fresh.read { try $0.recomputedDigest(of: "items") }))
        }
        await origin.stop()
        let redirects = origin.log.current.filter { $0.message == "request" && $0.metadata["status"] == "308" }
        #expect(redirects.count >= 2)
    }

    /// Polls until the client holds the store's head (a cache may serve the previous index
    /// for up to max-age plus stale-while-revalidate); the outcomes on the way.
    func converge(_ client: DeltaSnapReplica, to store: SQLiteDatabase) async throws -> [String] {
        let head = try #require(try store.head(of: "items")).token.description
        var outcomes: [String] = []
        for _ in 0..<30 where await client.token != head {
            outcomes.append(await client.sync(ignoringBackoff: true).name)
            if await client.token != head { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(await client.token == head, "\(outcomes)")
        return outcomes
    }
}

extension CDNCacheTests {
    /// The Swift client keeps no HTTP cache of its own (docs/PROTOCOL.md §10.2): even an
    /// answer its server allowed to be kept for a year is asked for again, so nothing a user
    /// lost access to is served from the device's HTTP cache — the replica is the cache.
    @Test func theSwiftTransportKeepsNoHTTPCache() async throws {
        let server = try await ScriptedServer.start { _, _ in
            .init(headers: ["Cache-Control": "public, max-age=31536000, immutable", "ETag": "\"e.1\""], body: Array("{}".utf8))
        }
        let transport = URLSessionTransport()
        for _ in 0..<3 {
            let response = try await transport.fetch(SyncRequest(url: server.url, headers: SyncRequest.headers(accessToken: "t"), timeout: .seconds(10)))
            #expect(response.status == 200)
            if let file = response.bodyFile { try? FileManager.default.removeItem(at: file) }
        }
        #expect(server.received.count == 3)
        await server.stop()
    }
}
