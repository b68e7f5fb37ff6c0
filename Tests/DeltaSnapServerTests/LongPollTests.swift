import DeltaSnapCore
@testable import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// `GET /v1/index?wait=` (docs/PROTOCOL.md §11) against a real server on 127.0.0.1: a held
/// request answers at the commit that changes the caller's index, a `304` when the wait
/// ends, never for a change the caller may not see; across processes and instances.
@Suite struct LongPollTests {
    static let secret = "long-poll-test-secret"

    /// One request on its own connection, off the cooperative pool, timed.
    static func timed(
        _ server: TestServer, _ path: String, headers: [String: String] = [:], method: String = "GET"
    ) async throws -> (response: RawHTTPClient.Response, seconds: Double) {
        let port = server.port
        return try await offPool {
            let started = Date()
            let response = try RawHTTPClient(port: port, timeoutSeconds: 90).request(method, path, headers: headers)
            return (response, Date().timeIntervalSince(started))
        }
    }

    static func put(_ server: TestServer, _ path: String, _ json: String) async throws {
        let response = try await server.adminPut(path, json)
        #expect(response.status == 200, "\(response.text)")
    }

    static func withServer(
        _ backend: TestBackend, maximumWaiters: Int = 10_000, access: AccessPolicy = AccessPolicy(),
        _ body: @escaping @Sendable (TestServer, TestDatabase) async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(backend, in: dir)
        try await store.importText(#"{"id":"AD","name":"Andorra"}"#, collection: "countries")
        let server = try await TestServer.start(database: store.url, access: access, maximumWaiters: maximumWaiters)
        do { try await server.stopping { try await body(server, store) } } catch {
            await store.stop()
            throw error
        }
        await store.stop()
    }

    @Test(arguments: TestBackend.allCases) func aHeldRequestIsAnsweredByTheCommitThatChangesTheIndex(_ backend: TestBackend) async throws {
        try await Self.withServer(backend) { server, _ in
            let first = try await Self.timed(server, "/v1/index").response
            let etag = try #require(first.header("ETag"))
            // Another ETag than the current one: answered at once.
            let stale = try await Self.timed(server, "/v1/index?wait=20", headers: ["If-None-Match": #""0123""#])
            #expect(stale.response.status == 200 && stale.response.header("ETag") == etag && stale.seconds < 5)
            #expect(stale.response.header("Cache-Control")?.hasPrefix("public, max-age=") == true)

            async let held = Self.timed(server, "/v1/index?wait=20", headers: ["If-None-Match": etag])
            try await eventually("the request was never held") { server.service.waiters.count == 1 }
            try await Self.put(server, "/v1/collections/countries/records/FR", #"{"name":"France"}"#)
            let woken = try await held
            #expect(woken.response.status == 200 && woken.seconds < 10, "\(woken.seconds) s")
            let next = try #require(woken.response.header("ETag"))
            #expect(next != etag)
            #expect(try SignedIndex.parse(woken.response.body).entries.first?.count == 2)
            let cursor = try #require(woken.response.header("DeltaSnap-Cursor").flatMap { Int64($0) })

            // Nothing changes: a 304 when the wait ends, with a cursor past the one sent.
            let quiet = try await Self.timed(server, "/v1/index?wait=1&cursor=\(cursor)", headers: ["If-None-Match": next])
            #expect(quiet.response.status == 304 && quiet.seconds >= 0.9, "\(quiet.response.status) after \(quiet.seconds) s")
            #expect(try #require(quiet.response.header("DeltaSnap-Cursor").flatMap { Int64($0) }) > cursor)

            // The ETag in the URL (a shared cache drops If-None-Match): the unchanged index again.
            let tag = next.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let viaURL = try await Self.timed(server, "/v1/index?wait=1&etag=\(tag)&cursor=\(cursor)")
            #expect(viaURL.response.status == 200 && viaURL.response.header("ETag") == next && viaURL.seconds >= 0.9)
            #expect(try #require(viaURL.response.header("DeltaSnap-Cursor").flatMap { Int64($0) }) > cursor)
        }
    }

    /// The public index's held requests are parked on their connection (no task): HEAD, a
    /// pipelined request behind one, `Connection: close`.
    @Test func aParkedRequestAnswersHeadPipeliningAndClose() async throws {
        try await Self.withServer(.sqlite) { server, _ in
            let etag = try #require(try await Self.timed(server, "/v1/index").response.header("ETag"))
            let head = try await Self.timed(server, "/v1/index?wait=1", headers: ["If-None-Match": etag, "X-Request-Id": "held-1"], method: "HEAD")
            #expect(head.response.status == 304 && head.seconds >= 0.9 && head.response.body.isEmpty)
            // What the held answer needs of its request is kept (not the request): its id is echoed.
            #expect(head.response.header("X-Request-Id") == "held-1")
            let port = server.port
            // A second request behind a held one: the held one is answered at once, in order.
            let (first, second, seconds) = try await offPool {
                let client = try RawHTTPClient(port: port)
                let started = Date()
                _ = try client.sendRaw(Array("GET /v1/index?wait=20 HTTP/1.1\r\nHost: x\r\nIf-None-Match: \(etag)\r\n\r\n".utf8), awaitingResponse: false)
                _ = try client.sendRaw(Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8), awaitingResponse: false)
                return (try client.nextResponse(), try client.nextResponse(), Date().timeIntervalSince(started))
            }
            #expect(first.status == 304 && first.header("DeltaSnap-Cursor") != nil && second.status == 200 && seconds < 5, "\(first.status) \(second.status) \(seconds)")
            // Connection: close is honoured after a held answer.
            let closed = try await offPool {
                let client = try RawHTTPClient(port: port)
                let answer = try client.request("GET", "/v1/index?wait=1", headers: ["If-None-Match": etag, "Connection": "close"])
                // Closed: no answer, or a reset when the request reached a socket already closed.
                let after = try? client.sendRaw(Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8), method: "GET")
                return (answer.status, after == nil)
            }
            #expect(closed.0 == 304 && closed.1, "the connection stays open after Connection: close")
            async let changed = Self.timed(server, "/v1/index?wait=20", headers: ["If-None-Match": etag], method: "HEAD")
            try await eventually("the request was never held") { server.service.waiters.count == 1 }
            try await Self.put(server, "/v1/collections/countries/records/FR", #"{"name":"France"}"#)
            let woken = try await changed
            #expect(woken.response.status == 200 && woken.response.body.isEmpty && woken.response.header("Content-Length").map { Int($0)! > 0 } == true)
        }
    }

    @Test func aWaitOrCursorOutOfRangeIsABadRequest() async throws {
        try await Self.withServer(.sqlite) { server, _ in
            for query in ["wait=0", "wait=61", "wait=soon", "wait=-1"] {
                let answer = try await Self.timed(server, "/v1/index?\(query)", headers: ["If-None-Match": #""x""#]).response
                #expect(answer.status == 400 && answer.text.contains(#""error":"bad_wait""#), "\(query): \(answer.text)")
            }
            for cursor in ["-5", "x", "9223372036854775807"] {
                let answer = try await Self.timed(server, "/v1/index?wait=1&cursor=\(cursor)", headers: ["If-None-Match": #""x""#]).response
                #expect(answer.status == 400 && answer.text.contains(#""error":"bad_cursor""#), "\(cursor): \(answer.text)")
            }
        }
    }

    @Test func beyondItsLimitTheServerTellsAWaiterToRetry() async throws {
        try await Self.withServer(.sqlite, maximumWaiters: 2) { server, _ in
            let etag = try #require(try await Self.timed(server, "/v1/index").response.header("ETag"))
            async let one = Self.timed(server, "/v1/index?wait=3", headers: ["If-None-Match": etag])
            async let two = Self.timed(server, "/v1/index?wait=3", headers: ["If-None-Match": etag])
            try await eventually("the request was never held") { server.service.waiters.count == 2 }
            let three = try await Self.timed(server, "/v1/index?wait=3", headers: ["If-None-Match": etag]).response
            #expect(three.status == 503 && three.header("Retry-After") == "1" && three.text.contains(#""error":"too_many_waiters""#), "\(three.text)")
            #expect(try await one.response.status == 304)
            #expect(try await two.response.status == 304)
        }
    }

    @Test func aStoppingServerAnswersItsWaitersAtOnce() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(.sqlite, in: dir)
        try await store.importText(#"{"id":"AD"}"#, collection: "countries")
        await store.stop()
        let server = try await TestServer.start(database: store.url)
        let etag = try #require(try await Self.timed(server, "/v1/index").response.header("ETag"))
        async let held = Self.timed(server, "/v1/index?wait=30", headers: ["If-None-Match": etag])
        try await eventually("the request was never held") { server.service.waiters.count == 1 }
        let stopping = Date()
        await server.stop()
        let answer = try await held
        #expect(answer.response.status == 304 && answer.seconds < 10, "\(answer.response.status) after \(answer.seconds) s")
        #expect(Date().timeIntervalSince(stopping) < 10)
    }

    @Test(arguments: TestBackend.allCases) func aWaiterNeverLearnsOfAPartitionItMayNotRead(_ backend: TestBackend) async throws {
        let access = AccessPolicy(jwtSecret: Self.secret, rules: try AccessRules(yaml: Fixtures.studyAppRules))
        try await Self.withServer(backend, access: access) { server, store in
            try await store.importText(#"{"id":"a1"}"#, collection: "attempts/alice")
            try await store.importText(#"{"id":"b1"}"#, collection: "attempts/bob")
            let alice = try await AccessClaims(subject: "alice", expires: Date().addingTimeInterval(600), write: [], read: []).signed(secret: Self.secret)
            let auth = ["Authorization": "Bearer \(alice)"]
            let view = try await Self.timed(server, "/v1/index", headers: auth).response
            let etag = try #require(view.header("ETag"))
            #expect(view.header("Cache-Control") == "private, no-store")

            async let unmoved = Self.timed(server, "/v1/index?wait=2", headers: auth.merging(["If-None-Match": etag]) { $1 })
            try await eventually("the request was never held") { server.service.waiters.count == 1 }
            try await Self.put(server, "/v1/collections/attempts/partitions/bob/records/b2", #"{"score":1}"#)
            let quiet = try await unmoved
            #expect(quiet.response.status == 304 && quiet.seconds >= 1.9, "bob's write reached alice's wait: \(quiet.response.status) after \(quiet.seconds) s")
            #expect(quiet.response.header("Cache-Control") == "private, no-store")

            async let moved = Self.timed(server, "/v1/index?wait=20", headers: auth.merging(["If-None-Match": etag]) { $1 })
            try await eventually("the request was never held") { server.service.waiters.count == 1 }
            try await Self.put(server, "/v1/collections/attempts/partitions/alice/records/a2", #"{"score":2}"#)
            let woken = try await moved
            #expect(woken.response.status == 200 && woken.seconds < 10 && woken.response.header("ETag") != etag)
            #expect(try SignedIndex.parse(woken.response.body).entries.map(\.collection) == ["attempts/alice", "countries"])
        }
    }

    @Test func aCommitByAnotherProcessWakesAWaiter() async throws {
        try await Self.withServer(.sqlite) { server, store in
            let etag = try #require(try await Self.timed(server, "/v1/index").response.header("ETag"))
            async let held = Self.timed(server, "/v1/index?wait=20", headers: ["If-None-Match": etag])
            try await eventually("the request was never held") { server.service.waiters.count == 1 }
            let url = store.url
            let imported = try await offPool {
                try CLI.runBlocking(["import", "--db", url, "--collection", "countries", "-"], stdin: #"{"id":"BE","name":"Belgium"}"# + "\n")
            }
            #expect(imported.status == 0, "\(imported.stderr)")
            let woken = try await held
            #expect(woken.response.status == 200 && woken.seconds < 10 && woken.response.header("ETag") != etag)
        }
    }

    @Test func aCommitOnOneInstanceWakesAWaiterOnAnother() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(.postgres, in: dir)
        try await store.importText(#"{"id":"AD"}"#, collection: "countries")
        let a = try await TestServer.start(database: store.url)
        let b = try await TestServer.start(database: store.url)
        do {
            let etag = try #require(try await Self.timed(b, "/v1/index").response.header("ETag"))
            async let held = Self.timed(b, "/v1/index?wait=20", headers: ["If-None-Match": etag])
            try await eventually("the request was never held") { b.service.waiters.count == 1 }
            let committed = Date()
            try await Self.put(a, "/v1/collections/countries/records/FR", #"{"name":"France"}"#)
            let woken = try await held
            let latency = Date().timeIntervalSince(committed)
            #expect(woken.response.status == 200 && woken.response.header("ETag") != etag)
            #expect(latency < 5, "commit on A to the answer on B: \(latency) s")
        } catch {
            Issue.record(error)
        }
        await a.stop()
        await b.stop()
        await store.stop()
    }
}
