import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// `serve` on PostgreSQL, against real servers on 127.0.0.1: the same bytes as on SQLite,
/// a replica held behind its primary, and the database restarted under running instances.
@Suite struct PostgresServingTests {
    static let configuration = StoreConfiguration(epochForNewCollections: "00000000000000b2", fixedCommitTime: 1_790_000_000)

    /// Every answer's status, validators and body bytes, for comparing two servers.
    func answers(_ server: TestServer) async throws -> [String] {
        let requests: [(String, [String: String])] = [
            ("/v1/collections/items", ["Accept-Encoding": "gzip"]),
            ("/v1/collections/items", [:]),
            ("/v1/collections/items", ["Accept-Encoding": "gzip", "If-None-Match": "\"00000000000000b2.1\""]),
            ("/v1/collections/items", ["If-None-Match": "\"00000000000000b2.2\""]),
            ("/v1/collections/items", ["If-None-Match": "\"00000000000000b2.4\""]),
            ("/v1/collections/items", ["If-Modified-Since": HTTPDate.format(1_789_999_000)]),
            ("/v1/collections", [:]),
            ("/v1/collections/items/deltas/00000000000000b2.2/00000000000000b2.4", ["Accept-Encoding": "gzip"]),
            ("/v1/collections/items/snapshots/00000000000000b2.4", ["Accept-Encoding": "gzip"]),
            ("/v1/collections/nope", [:]),
        ]
        return try await offPool {
            let connection = try server.connect()
            return try requests.map { path, headers in
                let response = try connection.request("GET", path, headers: headers)
                let validators = ["ETag", "Last-Modified", "Content-Encoding", "Cache-Control"].map { "\($0)=\(response.header($0) ?? "-")" }
                return "\(path) \(headers.sorted { $0.key < $1.key }) → \(response.status) \(validators) body=\(Self.fingerprint(response.body))"
            }
        }
    }

    static func fingerprint(_ bytes: [UInt8]) -> String {
        String(XXH64.hash(bytes), radix: 16) + "/" + String(bytes.count)
    }

    @Test(.timeLimit(.minutes(2)))
    func bodiesAndBakesAreByteIdenticalOnBothStores() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let sqlite = try await TestDatabase.make(.sqlite, in: dir, configuration: Self.configuration)
        let postgres = try await TestDatabase.make(.postgres, in: dir, configuration: Self.configuration)
        let writes: [(String, Bool)] = [
            (Fixtures.ndjson(0..<1500), false),
            (Fixtures.ndjson(100..<200, revision: 1), false),
            (#"{"id":"r0000005","hidden":true}"# + "\n" + #"{"id":"zé\tü","b":[1,2.50,"x"]}"#, false),
            (Fixtures.ndjson(0..<1400), true),
        ]
        for (text, replace) in writes {
            let a = try await sqlite.importText(text, collection: "items", replace: replace)
            let b = try await postgres.importText(text, collection: "items", replace: replace)
            #expect(a == b)
        }
        let onSQLite = try await TestServer.start(database: sqlite.url)
        let onPostgres = try await TestServer.start(database: postgres.url)
        let expected = try await answers(onSQLite)
        let got = try await answers(onPostgres)
        for (a, b) in zip(expected, got) { #expect(a == b) }
        #expect(expected.count == got.count)
        await onSQLite.stop()
        await onPostgres.stop()

        // bake: the same snapshot and manifest bytes.
        for (database, out) in [(sqlite, "a"), (postgres, "b")] {
            let baked = try await CLI.run(["bake", "--db", database.url, "--collection", "items", "--out", dir.file(out)])
            #expect(baked.status == 0, "\(baked.stderr)")
        }
        for file in ["items.snapshot", "manifest.json"] {
            let a = try #require(FileManager.default.contents(atPath: dir.file("a/\(file)")))
            let b = try #require(FileManager.default.contents(atPath: dir.file("b/\(file)")))
            #expect(a == b, "\(file) differs")
        }
        await sqlite.stop()
        await postgres.stop()
    }

    /// An instance reading from a streaming replica whose replay is paused: a client that
    /// got a newer token from the primary's instance gets `304` there (never older data),
    /// and every instance converges once replay resumes.
    @Test(.timeLimit(.minutes(2)))
    func aLaggingReplicaNeverMakesAClientRegress() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(.postgres, in: dir)
        let primary = try #require(database.cluster)
        try await database.importText(Fixtures.ndjson(0..<300), collection: "items")
        let replica = try await primary.startReplica(in: dir.path)
        defer { replica.stop() }
        let onPrimary = try await TestServer.start(database: database.url)
        let onReplica = try await TestServer.start(database: database.url, readDatabase: replica.url)
        let first = try #require(try await database.head(of: "items"))
        try await waitForHead(onReplica, version: first.version)

        try await replica.sql("SELECT pg_wal_replay_pause()")
        let auth = ["Authorization": "Bearer \(TestServer.writeToken)"]
        for index in 0..<3 {
            let put = try await offPool {
                try onPrimary.connect().request("PUT", "/v1/collections/items/records/new\(index)", headers: auth, body: Array(#"{"n":\#(index)}"#.utf8))
            }
            #expect(put.status == 200)
        }
        let latest = try #require(try await database.head(of: "items"))
        #expect(latest.version == first.version + 3)

        // A client polling the primary's instance first, then the lagging one.
        let poller = ProtocolPoller()
        try await offPool { try poller.sync(try onPrimary.connect()) }
        #expect(poller.token == latest.token.description)
        for _ in 0..<5 {
            let response = try await offPool {
                try onReplica.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": "\"\(latest.token)\""])
            }
            #expect(response.status == 304, "the lagging instance answered \(response.status)")
            try await offPool { try poller.sync(try onReplica.connect()) }
        }
        #expect(poller.token == latest.token.description)
        #expect(poller.problems.isEmpty, "\(poller.problems)")
        // The lagging instance's own write moves its head past its replica: a delta decided
        // from that head but read from the replica would go backwards; it answers 304.
        let own = try await offPool {
            try onReplica.connect().request("PUT", "/v1/collections/items/records/own", headers: auth, body: Array(#"{"n":9}"#.utf8))
        }
        #expect(own.status == 200)
        try await offPool { try poller.sync(try onReplica.connect()) }
        #expect(poller.token == latest.token.description)
        #expect(poller.problems.isEmpty, "\(poller.problems)")
        // A client at the first version gets nothing older from the lagging instance.
        let behind = try await offPool {
            try onReplica.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": "\"\(first.token)\""])
        }
        #expect(behind.status == 304 || behind.header("ETag") == "\"\(first.token)\"")

        try await replica.sql("SELECT pg_wal_replay_resume()")
        let final = try #require(try await database.head(of: "items"))
        try await waitForHead(onReplica, version: final.version)
        let caughtUp = ProtocolPoller()
        try await offPool { try caughtUp.sync(try onReplica.connect()) }
        #expect(caughtUp.token == final.token.description)
        // The client that waited converges too, by a delta.
        try await offPool { try poller.sync(try onReplica.connect()) }
        #expect(poller.token == final.token.description && poller.problems.isEmpty)
        #expect(caughtUp.export == (try await database.export("items")))
        await onPrimary.stop()
        await onReplica.stop()
        await database.stop()
    }

    /// PostgreSQL stopped under two running instances: what they know from memory (a current
    /// token's 304) is still answered, what needs the database is `503` with `Retry-After`
    /// and a JSON body; after a restart they reconnect by themselves and miss nothing.
    @Test(.timeLimit(.minutes(2)))
    func aDatabaseRestartIsAnswered503AndMissesNothing() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(.postgres, in: dir)
        let cluster = try #require(database.cluster)
        try await database.importText(Fixtures.ndjson(0..<100), collection: "items")
        let first = try #require(try await database.head(of: "items"))
        let instances = [try await TestServer.start(database: cluster.url), try await TestServer.start(database: cluster.url)]
        let pollers = [ProtocolPoller(), ProtocolPoller()]
        for (instance, poller) in zip(instances, pollers) { try await offPool { try poller.sync(try instance.connect()) } }

        cluster.stop()
        for instance in instances {
            let current = try await offPool { try instance.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": "\"\(first.token)\""]) }
            #expect(current.status == 304)
            let needsDatabase = try await offPool {
                try instance.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": "\"\(first.epoch).0\"", "Accept-Encoding": "identity"])
            }
            #expect(needsDatabase.status == 503, "\(needsDatabase.status) \(needsDatabase.text)")
            #expect(needsDatabase.header("Retry-After") == "1")
            #expect(needsDatabase.text.contains(#""error":"database_unavailable""#))
            let write = try await offPool {
                try instance.connect().request("PUT", "/v1/collections/items/records/x", headers: ["Authorization": "Bearer \(TestServer.writeToken)"], body: Array(#"{"a":1}"#.utf8))
            }
            #expect(write.status == 503)
        }

        let restarted = try await cluster.restarted()
        defer { restarted.stop() }
        // Committed while the instances were reconnecting: neither may miss it.
        let writer = try await TestDatabase.reconnect(to: restarted)
        try await writer.importText(Fixtures.ndjson(0..<5, revision: 7), collection: "items")
        let latest = try #require(try await writer.head(of: "items"))
        for (instance, poller) in zip(instances, pollers) {
            try await waitForHead(instance, version: latest.version)
            #expect(poller.token == first.token.description)
            try await offPool { try poller.sync(try instance.connect()) }
            #expect(poller.token == latest.token.description)
            #expect(poller.problems.isEmpty, "\(poller.problems)")
            #expect(poller.applied.delta == 1)
            await instance.stop()
        }
        await writer.stop()
        await database.stop()
    }

    /// PostgreSQL stopped while writes are in flight: every request is answered — taken, or
    /// `503` — none waits forever, and once it is back every write is taken again. PostgresNIO
    /// loses the promise of a query written on a closed connection; the `ROLLBACK` of a
    /// transaction the stop broke was one, and each such request held a pool connection for good.
    @Test(.timeLimit(.minutes(2)))
    func writesInFlightWhenTheDatabaseStopsAreAllAnswered() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(.postgres, in: dir)
        let cluster = try #require(database.cluster)
        try await database.importText(Fixtures.ndjson(0..<10), collection: "items")
        let instance = try await TestServer.start(database: cluster.url)
        let writing = LockedValue(true)
        let taken = LockedValue(0)
        let port = instance.port
        let writers = (0..<8).map { writer in
            Task {
                try await offPool { () -> [String] in
                    var slow: [String] = []
                    var count = 0
                    while writing.withLock({ $0 }) {
                        count += 1
                        let started = ContinuousClock.now
                        let answer = Result {
                            try RawHTTPClient(port: port, timeoutSeconds: 12).request(
                                "PUT", "/v1/collections/items/records/w\(writer)-\(count)", headers: ["Authorization": "Bearer \(TestServer.writeToken)"],
                                body: Array(#"{"n":\#(count)}"#.utf8))
                        }
                        if ContinuousClock.now - started > .seconds(10) { slow.append("w\(writer)-\(count): \(answer)") }
                        if (try? answer.get())?.status == 200 { taken.withLock { $0 += 1 } }
                    }
                    return slow
                }
            }
        }
        // The writers have writes taken before PostgreSQL stops under them, and after it is back.
        try await eventually("no write was taken before the stop", within: .seconds(30)) { taken.withLock { $0 } >= 16 }
        try await offPool { cluster.stop() }
        let restarted = try await cluster.restarted()
        defer { restarted.stop() }
        let takenBefore = taken.withLock { $0 }
        try await eventually("no write was taken after the restart", within: .seconds(30)) { taken.withLock { $0 } >= takenBefore + 16 }
        writing.withLock { $0 = false }
        var unanswered: [String] = []
        for writer in writers { unanswered += try await writer.value }
        #expect(unanswered.isEmpty, "requests that waited past 10 s: \(unanswered)")
        // Every pool connection is back: 30 writes in a row are taken (a lost one would hold
        // its connection, and 24 of them every write).
        var statuses: [Int] = []
        for count in 0..<30 {
            let answer = try await offPool {
                try RawHTTPClient(port: port, timeoutSeconds: 12).request(
                    "PUT", "/v1/collections/items/records/after-\(count)", headers: ["Authorization": "Bearer \(TestServer.writeToken)"], body: Array(#"{"a":1}"#.utf8))
            }
            statuses.append(answer.status)
        }
        #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses)")
        await instance.stop()
        await database.stop()
    }

    /// Compaction (the CLI) and the signed index on PostgreSQL: a token below the new floor
    /// gets a full body, and a client pinning the signing key verifies every state it applies.
    @Test(.timeLimit(.minutes(2)))
    func compactionAndSignedSyncWorkOnPostgres() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(.postgres, in: dir)
        try await database.importText(Fixtures.ndjson(0..<50), collection: "items")
        let first = try #require(try await database.head(of: "items"))
        try await database.importText(#"{"id":"r0000001","hidden":true}"#, collection: "items")
        try await database.importText(Fixtures.ndjson(10..<20, revision: 2), collection: "items")
        let key = IndexSigningKey.generate()
        let server = try await TestServer.start(database: database.url, signingKeys: [key])
        let replica = try DeltaSnapReplica(
            path: dir.file("phone.sqlite"), collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!,
            trustedKeys: [key.publicKey])
        #expect(await replica.sync().name == "full")
        try await database.importText(Fixtures.ndjson(20..<25, revision: 3), collection: "items")
        let latest = try #require(try await database.head(of: "items"))
        try await waitForHead(server, version: latest.version)
        #expect(await replica.sync().name == "delta")
        #expect(await replica.token == latest.token.description)
        #expect(try await replica.verify())

        let compacted = try await CLI.run(["compact", "--db", database.url, "--collection", "items", "--keep-versions", "1"])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        #expect(compacted.stdout.contains("1 tombstone removed"), "\(compacted.stdout)")
        // The new floor reaches the instance (the compaction notifies): below it, a full body.
        var answer = ""
        for _ in 0..<100 {
            let response = try await offPool {
                try server.connect().request("GET", "/v1/collections/items", headers: ["If-None-Match": "\"\(first.token)\""])
            }
            answer = response.text
            if answer.contains(#""kind":"full""#) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(answer.contains(#""kind":"full""#) && !answer.contains("r0000001"))
        await server.stop()
        await database.stop()
    }
}
