@testable import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// What a script or an app relies on from the client and the CLI, driven from outside as a
/// third party would: a replica bound to its collection and server, a server's wait honoured
/// across runs, one exit-code scheme, a replayed index that neither shortens nor extends what
/// the client accepts, and whole-second JWT expiries.
@Suite struct ClientContractTests {
    struct World: @unchecked Sendable {
        let dir: TemporaryDirectory
        let store: SQLiteDatabase
        let server: TestServer

        func url(_ collection: String, port: Int? = nil) -> String {
            "http://127.0.0.1:\(port ?? server.port)/v1/collections/\(collection)"
        }

        func run(_ arguments: [String]) async throws -> CLI.Result { try await offPool { try CLI.runBlocking(arguments) } }
    }

    func withWorld(_ body: (World) async throws -> Void) async throws {
        try await TestServer.withDirectory(seed: { db in
            let store = try SQLiteDatabase(path: db)
            try Fixtures.importText(#"{"id":"n1","title":"a"}"# + "\n" + #"{"id":"n2","title":"b"}"#, into: store, collection: "notes")
            try Fixtures.importText(#"{"id":"o1"}"#, into: store, collection: "other")
        }) { server, dir in
            try await body(World(dir: dir, store: try SQLiteDatabase(path: dir.file("s.sqlite")), server: server))
        }
    }

    /// A replica remembers its collection: syncing it with another collection's URL is refused
    /// in one line, nothing is pushed there, and its data stays.
    @Test func aReplicaIsBoundToItsCollectionAndServer() async throws {
        try await withWorld { w in
            let replica = w.dir.file("x.sqlite")
            let token = ["--token", TestServer.writeToken]
            #expect(try await w.run(["sync", "--url", w.url("notes"), "--replica", replica] + token).status == 0)
            #expect(try await w.run(["local", "put", "--replica", replica, "note-7", #"{"text":"mine"}"#]).status == 0)
            let other = try await w.run(["sync", "--url", w.url("other"), "--replica", replica] + token)
            #expect(other.status == 1, "\(other.stdout)")
            #expect(other.stderr.split(separator: "\n").count == 1)
            #expect(other.stderr.contains(#"replica of collection "notes", not "other""#), "\(other.stderr)")
            #expect(try Fixtures.export(w.store, "other") == #"{"id":"o1"}"# + "\n")
            #expect(try await w.run(["pending", "--replica", replica]).stdout.hasPrefix("1 put note-7"))

            let inspect = try await w.run(["inspect", replica])
            #expect(inspect.status == 0, "\(inspect.stderr)")
            #expect(inspect.stdout.contains("collection: notes") && inspect.stdout.contains("server: \(w.url("notes"))"), "\(inspect.stdout)")

            // Another host is another server; another port on the same host is the same one
            // restarted. --rebind accepts a moved server.
            let moved = try await w.run(["pull", "--url", "http://localhost:\(w.server.port)/v1/collections/notes", "--replica", replica])
            #expect(moved.status == 1 && moved.stderr.contains("--rebind"), "\(moved.stderr)")
            let rebound = try await w.run(["pull", "--url", "http://localhost:\(w.server.port)/v1/collections/notes", "--replica", replica, "--rebind"])
            #expect(rebound.status == 0, "\(rebound.stderr)")
            #expect(throws: ReplicaBindingError.self) {
                _ = try DeltaSnapReplica(path: replica, collection: "other", url: URL(string: w.url("other"))!)
            }
            _ = try DeltaSnapReplica(path: replica, collection: "notes", url: URL(string: "http://localhost:1/v1/collections/notes")!)
        }
    }

    /// A push answered `503` with `Retry-After: 30`: the same sync does not pull, the next run
    /// neither pushes nor pulls (and says so, exit 4), `--ignore-backoff` sends at once.
    @Test func aWaitTheServerAskedForIsHonouredAcrossRuns() async throws {
        try await withWorld { w in
            let requests = Locked<[String]>([])
            let proxy = try FaultProxy(upstreamPort: w.server.port) { _, method, path in
                requests.withLock { $0.append("\(method) \(path)") }
                guard method == "POST" else { return .forward }
                let pushes = requests.current.filter { $0.hasPrefix("POST") }.count
                return pushes == 1
                    ? .respondWith(status: 503, headers: ["Retry-After": "30"], body: #"{"error":"database_unavailable","message":"later"}"#)
                    : .forward
            }
            defer { proxy.stop() }
            let replica = w.dir.file("r.sqlite")
            let url = w.url("notes", port: proxy.port)
            let sync = ["sync", "--url", url, "--replica", replica, "--token", TestServer.writeToken]
            #expect(try await w.run(["pull", "--url", url, "--replica", replica]).status == 0)
            #expect(try await w.run(["local", "put", "--replica", replica, "n3", "{}"]).status == 0)
            requests.withLock { $0 = [] }

            let first = try await w.run(sync)
            #expect(first.status == 4, "\(first.stdout)\(first.stderr)")
            #expect(first.stdout.contains("push failed: status 503") && first.stdout.contains("pulled: deferred"), "\(first.stdout)")
            #expect(requests.current.count == 1, "the pull after a 503 + Retry-After must wait: \(requests.current)")

            let second = try await w.run(sync)
            #expect(second.status == 4 && second.stdout.contains("pulled: deferred"), "\(second.stdout)")
            #expect(second.stderr.contains("deferred") && second.stderr.contains("--ignore-backoff"), "\(second.stderr)")
            let pulled = try await w.run(["pull", "--url", url, "--replica", replica])
            #expect(pulled.status == 4 && pulled.stdout.hasPrefix("deferred"), "\(pulled.stdout)")
            #expect(requests.current.count == 1, "nothing is sent while the wait runs: \(requests.current)")

            let forced = try await w.run(sync + ["--ignore-backoff"])
            #expect(forced.status == 0, "\(forced.stdout)\(forced.stderr)")
            #expect(forced.stdout.hasPrefix("pushed 1\nrefused 0\npulled: delta"), "\(forced.stdout)")
            #expect(try Fixtures.export(w.store, "notes").contains(#"{"id":"n3"}"#))
            // A success clears the wait: the next run goes out at once.
            #expect(try await w.run(sync).status == 0)
        }
    }

    /// One documented scheme: 0 done, 1 error, 2 usage, 3 writes refused, 4 try later.
    @Test func exitCodesFollowOneScheme() async throws {
        try await withWorld { w in
            let replica = w.dir.file("r.sqlite")
            let sync = ["sync", "--url", w.url("notes"), "--replica", replica, "--token", TestServer.writeToken]
            #expect(try await w.run(sync).status == 0)
            // Usage errors exit 2 with ArgumentParser's message.
            let missing = try await w.run(["pull", "--replica", replica])
            #expect(missing.status == 2 && missing.stderr.contains("--url"), "\(missing.stderr)")
            #expect(try await w.run(["pull", "--url", "ftp://x", "--replica", replica]).status == 2)
            #expect(try await w.run(["no-such-command"]).status == 2)
            #expect(try await w.run(["--help"]).status == 0)
            // A write the server refuses: rolled back, listed, exit 3.
            try Fixtures.importText(#"{"id":"n9"}"#, into: w.store, collection: "notes")
            #expect(try await w.run(["local", "insert", "--replica", replica, "n9", #"{"v":1}"#]).status == 0)
            let refused = try await w.run(sync)
            #expect(refused.status == 3 && refused.stdout.contains("refused 1"), "\(refused.stdout)")
            // Nothing listens: try later, exit 4, the data stays.
            let dead = try await w.run(["sync", "--url", "http://127.0.0.1:9/v1/collections/notes", "--replica", replica, "--timeout", "2"])
            #expect(dead.status == 4, "\(dead.stdout)\(dead.stderr)")
            // An answer that cannot be used: exit 1.
            let unknown = try await w.run(["pull", "--url", w.url("missing"), "--replica", w.dir.file("m.sqlite")])
            #expect(unknown.status == 1, "\(unknown.stdout)")
        }
    }

    /// Through a proxy: a rejected answer on a replica that holds data is 1; refused writes
    /// and then a pull the server cannot answer is 4 (try later wins over refused writes).
    @Test func exitCodePrecedence() async throws {
        try await withWorld { w in
            let pulls = Locked<Int>(0)
            let status = Locked<Int>(0)
            let proxy = try FaultProxy(upstreamPort: w.server.port) { _, method, _ in
                guard method == "GET" else { return .forward }
                let answer = status.current
                pulls.withLock { $0 += 1 }
                return answer == 0 ? .forward : .respond(status: answer, body: #"{"error":"x","message":"scripted"}"#)
            }
            defer { proxy.stop() }
            let replica = w.dir.file("r.sqlite")
            let url = w.url("notes", port: proxy.port)
            #expect(try await w.run(["pull", "--url", url, "--replica", replica]).status == 0)
            status.withLock { $0 = 410 }
            let gone = try await w.run(["pull", "--url", url, "--replica", replica])
            #expect(gone.status == 1 && gone.stdout.hasPrefix("failed"), "\(gone.stdout)")
            try Fixtures.importText(#"{"id":"n9"}"#, into: w.store, collection: "notes")
            #expect(try await w.run(["local", "insert", "--replica", replica, "n9", "{}"]).status == 0)
            status.withLock { $0 = 503 }
            let both = try await w.run(["sync", "--url", url, "--replica", replica, "--token", TestServer.writeToken])
            #expect(both.stdout.contains("refused 1") && both.stdout.contains("pulled: failed"), "\(both.stdout)")
            #expect(both.status == 4, "\(both.stdout)")
        }
    }

    /// Tokens go into URL path segments percent-encoded; a query string stays a query string.
    @Test func cacheableURLsEncodeTokensAsPathSegments() throws {
        let url = URL(string: "https://cdn.example.com/data/v1/collections/notes?key=abc")!
        let built = url.appendingSegments("deltas", "a/b c", "e.1")
        #expect(built.absoluteString == "https://cdn.example.com/data/v1/collections/notes/deltas/a%2Fb%20c/e.1?key=abc")
        #expect(URL(string: "http://h/v1/collections/n/")!.appendingSegments("snapshots", "t.2").absoluteString == "http://h/v1/collections/n/snapshots/t.2")
    }

    /// Several collections: a wait the index's answer asks for holds every replica, across runs.
    @Test func aReplicaSetHonoursTheIndexWait() async throws {
        try await withWorld { w in
            let requests = Locked<[String]>([])
            let proxy = try FaultProxy(upstreamPort: w.server.port) { _, method, path in
                requests.withLock { $0.append("\(method) \(path)") }
                return path.hasPrefix("/v1/index")
                    ? .respondWith(status: 503, headers: ["Retry-After": "30"], body: #"{"error":"database_unavailable","message":"later"}"#)
                    : .forward
            }
            defer { proxy.stop() }
            let pull = ["pull", "--url", "http://127.0.0.1:\(proxy.port)", "--collections", "notes,other", "--replica", w.dir.file("set")]
            let first = try await w.run(pull)
            #expect(first.status == 4 && first.stdout.contains("notes: deferred") && first.stdout.contains("other: deferred"), "\(first.stdout)\(first.stderr)")
            #expect(requests.current == ["GET /v1/index"])
            let second = try await w.run(pull)
            #expect(second.status == 4 && second.stderr.contains("--ignore-backoff"), "\(second.stdout)\(second.stderr)")
            #expect(requests.current == ["GET /v1/index"], "nothing is sent while the wait runs: \(requests.current)")
            let forced = try await w.run(pull + ["--ignore-backoff"])
            #expect(forced.status == 0 && forced.stdout.contains("notes: full"), "\(forced.stdout)\(forced.stderr)")
        }
    }

    /// `deltasnap token` mints `exp` in whole seconds.
    @Test func mintedTokensExpireOnAWholeSecond() async throws {
        let before = Int(Date().timeIntervalSince1970)
        let minted = try await offPool { try CLI.runBlocking(["token", "--secret", "s", "--subject", "alice", "--expires-in", "600"]) }
        let after = Int(Date().timeIntervalSince1970.rounded(.up))
        #expect(minted.status == 0)
        let payload = try #require(minted.stdout.split(separator: ".").dropFirst().first)
        var base64 = payload.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        let json = try JSONReader(bytes: Array(try #require(Data(base64Encoded: base64)))).readValue()
        guard case .number(let exp)? = json["exp"] else {
            Issue.record("no numeric exp in \(json)")
            return
        }
        let wholeSeconds = exp.allSatisfy { $0.isNumber }
        #expect(wholeSeconds, "exp is \(exp)")
        let seconds = try #require(Int(exp))
        // Minted while the command ran, however slow the machine.
        #expect((before + 600...after + 600).contains(seconds), "exp \(seconds), run between \(before) and \(after)")
    }
}
