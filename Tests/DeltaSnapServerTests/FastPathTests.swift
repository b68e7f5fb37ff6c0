import DeltaSnapCore
import DeltaSnapSQLiteStore
@testable import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import HTTPTypes
import Logging
import NIOEmbedded
import NIOHTTPTypes
import Testing

/// Polls answered from memory before the router (a current token's 304, a cached delta)
/// must be indistinguishable from the router's answers, keep responses in order on a
/// connection, and never skip authorization.
@Suite struct FastPathTests {
    func withServer(access: AccessPolicy = AccessPolicy(), _ body: @escaping @Sendable (TestServer, String) async throws -> Void) async throws {
        try await TestServer.with(
            seed: { try Fixtures.importText(Fixtures.ndjson(0..<50), into: try SQLiteDatabase(path: $0), collection: "items") },
            start: { try await TestServer.start(database: $0, access: access) }, body)
    }

    func get(_ server: TestServer, _ path: String, _ headers: [String: String] = [:]) async throws -> RawHTTPClient.Response {
        try await offPool { try server.connect().request("GET", path, headers: headers) }
    }

    func fastPathAnswers(_ server: TestServer) async throws -> Int {
        let text = try await server.metricsText()
        let line = text.split(separator: "\n").first { $0.hasPrefix("deltasnap_fast_path_responses_total ") }
        return line.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
    }

    /// Headers that differ by nature between two answers (time, request id).
    func comparable(_ response: RawHTTPClient.Response) -> [String] {
        response.headers.filter { !["date", "x-request-id"].contains($0.0.lowercased()) }
            .map { "\($0.0.lowercased()): \($0.1)" }.sorted()
    }

    @Test func answersBeforeTheRouterEqualTheRoutersAnswers() async throws {
        try await withServer { server, db in
            let full = try await get(server, "/v1/collections/items", ["Accept-Encoding": "gzip"])
            let oldETag = try #require(full.header("ETag"))
            try Fixtures.importText(Fixtures.ndjson(0..<3, revision: 1), into: try SQLiteDatabase(path: db), collection: "items")
            var current = oldETag
            for _ in 0..<200 where current == oldETag {
                try await Task.sleep(for: .milliseconds(10))
                current = try #require(try await get(server, "/v1/collections/items").header("ETag"))
            }
            #expect(current != oldETag)

            // A query string keeps a request away from the fast path: the router answers it.
            let before = try await fastPathAnswers(server)
            for (validator, gzip) in [(current, true), (current, false), (oldETag, true), (oldETag, false)] {
                var headers = ["If-None-Match": validator]
                if gzip { headers["Accept-Encoding"] = "gzip" }
                let routed = try await get(server, "/v1/collections/items?via=router", headers)  // also caches the delta
                let fast = try await get(server, "/v1/collections/items", headers)
                #expect(routed.status == fast.status, "\(validator) gzip \(gzip)")
                #expect(comparable(routed) == comparable(fast), "\(validator) gzip \(gzip)")
                #expect(routed.body == fast.body)
                #expect(fast.header("Date") != nil)
                if fast.status == 200 { #expect(fast.header("X-Request-Id") != nil) }
            }
            #expect(try await fastPathAnswers(server) - before == 4)

            // A HEAD of the current token is answered there too; the client's id is echoed.
            let currentETag = current
            let head = try await offPool { try server.connect().request("HEAD", "/v1/collections/items", headers: ["If-None-Match": currentETag, "X-Request-Id": "h-1"]) }
            #expect(head.status == 304 && head.header("X-Request-Id") == "h-1" && head.header("ETag") == currentETag)
        }
    }

    /// Index answers given before the router are counted as the router counts them (route
    /// and status) and as fast-path answers, as collection polls are.
    @Test func indexAnswersBeforeTheRouterAreCountedAsFastPathAnswers() async throws {
        try await withServer { server, _ in
            let first = try await get(server, "/v1/index")
            #expect(first.status == 200)
            let etag = try #require(first.header("ETag"))
            let before = try await fastPathAnswers(server)
            for _ in 0..<3 {
                let again = try await get(server, "/v1/index", ["If-None-Match": etag])
                #expect(again.status == 304)
            }
            #expect(try await fastPathAnswers(server) == before + 3)
            let metrics = try await server.metricsText()
            #expect(metrics.contains(#"deltasnap_http_responses_total{route="/v1/index",status="304"} 3"#), "\(metrics)")
        }
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        try await withServer { server, _ in
            let etag = try #require(try await get(server, "/v1/collections/items").header("ETag"))
            let before = try await fastPathAnswers(server)
            let responses = try await offPool {
                let client = try server.connect()
                // A streamed identity body from the router, then a poll that could be
                // answered at once: it must wait for the body before it.
                let first = "GET /v1/collections/items HTTP/1.1\r\nHost: x\r\n\r\n"
                let second = "GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: \(etag)\r\nX-Request-Id: second\r\n\r\n"
                let third = "GET /v1/collections/nope HTTP/1.1\r\nHost: x\r\nX-Request-Id: third\r\n\r\n"
                let a = try client.sendRaw(Array((first + second + third).utf8), method: "GET")
                return [a, try client.nextResponse(), try client.nextResponse()]
            }
            #expect(responses.map { $0?.status } == [200, 304, 404])
            #expect((responses[0]?.body.count ?? 0) > 1000)
            #expect(responses[1]?.header("X-Request-Id") == "second" && responses[2]?.header("X-Request-Id") == "third")
            // Polls on an idle connection take the fast path again.
            #expect(try await get(server, "/v1/collections/items", ["If-None-Match": etag]).status == 304)
            #expect(try await fastPathAnswers(server) > before)
        }
    }

    static let polls: [(String, PollRequestHead?)] = [
        ("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"a.1\"\r\n\r\n", PollRequestHead(target: .collection("items"), ifNoneMatch: "\"a.1\"", requestID: nil)),
        ("GET /v1/collections/items HTTP/1.1\r\nif-none-match:\t\"a.1\" \r\nX-Request-Id: r-1\r\nAccept-Encoding: gzip\r\n\r\n", PollRequestHead(target: .collection("items"), ifNoneMatch: "\"a.1\"", requestID: "r-1", acceptEncoding: ["gzip"])),
        ("GET /v1/index HTTP/1.1\r\nHost: x\r\nauthorization: Bearer t.u.v \r\nIf-None-Match: \"e1\"\r\n\r\n", PollRequestHead(target: .index, ifNoneMatch: "\"e1\"", authorization: "Bearer t.u.v")),
        ("GET /v1/index HTTP/1.1\r\nIf-None-Match: \"e1\"\r\n\r\n", PollRequestHead(target: .index, ifNoneMatch: "\"e1\"")),
        // Not a poll, or not one this parser is sure of: NIO's decoder gets it.
        ("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\n\r\n", nil),
        ("HEAD /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\n\r\n", nil),
        ("GET /v1/collections/items?x=1 HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\n\r\n", nil),
        ("GET /v1/collections/Items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.0\r\nIf-None-Match: \"a.1\"\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\nIf-None-Match: \"b.2\"\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\nConnection: close\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\nContent-Length: 0\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\nTransfer-Encoding: chunked\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\n folded\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\nIf-None-Match: \"a.1\"\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf None Match: \"a.1\"\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a\u{7F}1\"\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"é\"\r\n\r\n", nil),
        ("GET /v1/collections/items HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\n\r\nGET", nil),
        // A held request (a query), two tokens, another target, no validator: not answered here.
        ("GET /v1/index?wait=30 HTTP/1.1\r\nIf-None-Match: \"e1\"\r\n\r\n", nil),
        ("GET /v1/index HTTP/1.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\nIf-None-Match: \"e1\"\r\n\r\n", nil),
        ("GET /v1/indexes HTTP/1.1\r\nIf-None-Match: \"e1\"\r\n\r\n", nil),
        ("GET /v1/index HTTP/1.1\r\nAuthorization: Bearer a\r\n\r\n", nil),
        ("GET /v1/index HTTP/1.1\r\nIf-None-Match: \"e1\"\r\nConnection: close\r\n\r\n", nil),
    ]

    @Test(arguments: 0..<polls.count)
    func onlyPlainPollsAreReadFromRawBytes(_ index: Int) {
        let (text, expected) = Self.polls[index]
        #expect(PollRequestHead.parse(Array(text.utf8)[...]) == expected, "\(text.debugDescription)")
    }

    @Test func rawPollsArePipelinedSplitAndHandedOnInOrder() async throws {
        try await withServer { server, _ in
            let etag = try #require(try await get(server, "/v1/collections/items").header("ETag"))
            let poll = "GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: \(etag)\r\n\r\n"
            let full = "GET /v1/collections/items HTTP/1.1\r\nHost: x\r\n\r\n"
            let statuses = try await offPool {
                let client = try server.connect()
                // Two polls in one segment, the third split in two, then a request for the
                // router, then another poll: all answered, in order.
                var answers = [try client.sendRaw(Array((poll + poll).utf8), method: "GET")?.status, try client.nextResponse().status]
                let third = Array(poll.utf8)
                answers.append(try client.sendRaw(Array(third[..<30]), method: "GET", awaitingResponse: false)?.status)
                answers.append(try client.sendRaw(Array(third[30...]) + Array((full + poll).utf8), method: "GET")?.status)
                answers.append(try client.nextResponse().status)
                answers.append(try client.nextResponse().status)
                return answers
            }
            #expect(statuses == [304, 304, nil, 304, 200, 304])
            // A head that stops half-way, then the end of input: the decoder sees it and the
            // server keeps serving.
            _ = try await offPool { try server.connect().sendRaw(Array("GET /v1/collections/items HTTP/1.1\r\nHo".utf8), halfClose: true, method: "GET") }
            #expect(try await get(server, "/v1/collections/items", ["If-None-Match": etag]).status == 304)
        }
    }

    /// An unchanged view's `304` is written from raw bytes (the commonest request of an app
    /// with users): the same answer as the fast path's and the router's, for that user only.
    @Test func anUnchangedViewIsAnsweredFromRawBytesAsTheRouterAnswersIt() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(.sqlite, in: dir)
        try await store.importText(#"{"id":"AD","name":"Andorra"}"#, collection: "countries")
        try await store.importText(#"{"id":"a1","score":3}"#, collection: "attempts/alice")
        let secret = "raw-index-secret"
        let server = try await TestServer.start(
            database: store.url, access: AccessPolicy(jwtSecret: secret, rules: try AccessRules(yaml: Fixtures.studyAppRules)))
        func token(_ subject: String) async throws -> String {
            try await AccessClaims(subject: subject, expires: Date().addingTimeInterval(600), write: [], read: []).signed(secret: secret)
        }
        try await server.stopping {
            let alice = "Bearer \(try await token("alice"))"
            let first = try await get(server, "/v1/index", ["Authorization": alice])
            let etag = try #require(first.header("ETag"))
            #expect(first.status == 200 && first.text.contains("attempts/alice"))
            // Memory has it, so the raw handler answers it.
            #expect(server.service.memory.index.indexNotModifiedFromMemory(authorization: alice, ifNoneMatch: etag) != nil)
            let raw = try await get(server, "/v1/index", ["Authorization": alice, "If-None-Match": etag, "X-Request-Id": "raw-1"])
            // `Connection` keeps a request from the raw handler (the fast path answers it); a
            // query from both (the router answers it).
            let fast = try await get(server, "/v1/index", ["Authorization": alice, "If-None-Match": etag, "Connection": "keep-alive"])
            let routed = try await get(server, "/v1/index?via=router", ["Authorization": alice, "If-None-Match": etag])
            for answer in [raw, fast, routed] {
                #expect(answer.status == 304 && answer.body.isEmpty)
                #expect(comparable(answer) == comparable(routed))
                #expect(answer.header("Cache-Control") == "private, no-store" && answer.header("Date") != nil)
            }
            #expect(raw.header("X-Request-Id") == "raw-1")
            // Her ETag is hers: another user, no token, or a token memory does not know yet get
            // their own answer, never her 304.
            let bob = "Bearer \(try await token("bob"))"
            #expect(server.service.memory.index.indexNotModifiedFromMemory(authorization: bob, ifNoneMatch: etag) == nil)
            let bobs = try await get(server, "/v1/index", ["Authorization": bob, "If-None-Match": etag])
            #expect(bobs.status == 200 && !bobs.text.contains("attempts/alice"))
            #expect(server.service.memory.index.indexNotModifiedFromMemory(authorization: nil, ifNoneMatch: etag) == nil)
            #expect(try await get(server, "/v1/index", ["If-None-Match": etag]).status == 200)
            #expect(try await get(server, "/v1/index", ["Authorization": "Bearer not.a.jwt", "If-None-Match": etag]).status == 401)
            // The raw answers are counted with the index's others.
            let metrics = try await server.metricsText()
            let line = metrics.split(separator: "\n").first {
                $0.hasPrefix("deltasnap_http_responses_total{") && $0.contains(#""/v1/index""#) && $0.contains(#""304""#)
            }
            #expect(line?.hasSuffix(" 3") == true, "\(metrics)")
            // A change to her view: the raw handler steps aside and she gets the new document.
            try await store.importText(#"{"id":"a2","score":1}"#, collection: "attempts/alice")
            var changed = try await get(server, "/v1/index", ["Authorization": alice, "If-None-Match": etag])
            for _ in 0..<200 where changed.status == 304 {
                try await Task.sleep(for: .milliseconds(20))
                changed = try await get(server, "/v1/index", ["Authorization": alice, "If-None-Match": etag])
            }
            #expect(changed.status == 200 && changed.header("ETag") != etag)
        }
        await store.stop()
    }

    @Test func privateCollectionsAreNeverAnsweredBeforeAuthorization() async throws {
        var access = AccessPolicy()
        access.jwtSecret = "fast-path-secret"
        access.privateCollections = ["items"]
        try await withServer(access: access) { server, _ in
            let authorized = ["Authorization": "Bearer \(TestServer.writeToken)"]
            let etag = try #require(try await get(server, "/v1/collections/items", authorized).header("ETag"))
            let anonymous = try await get(server, "/v1/collections/items", ["If-None-Match": etag])
            #expect(anonymous.status == 401)
            #expect(anonymous.header("ETag") == nil)
            #expect(try await get(server, "/v1/collections/items", authorized.merging(["If-None-Match": etag]) { $1 }).status == 304)
            #expect(try await fastPathAnswers(server) == 0)
        }
    }
}

extension FastPathTests {
    /// A connection closed from behind the fast path while a request is with the router (an
    /// empty or cut reply for its client) is said at warning level, naming the request; one
    /// whose answer ended is not.
    @Test func aCloseUnderAnUnansweredRequestIsLoggedWithIt() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let api = try await DeltaSnapAPI(store: try SQLiteCollectionStore(path: dir.file("s.sqlite")))
        let lines = CapturingLogHandler.Lines([])
        let logger = Logger(label: "fast") { _ in CapturingLogHandler(lines: lines) }
        let put = HTTPRequest(method: .put, scheme: nil, authority: "x", path: "/v1/collections/items/records/a")
        func warnings() -> [CapturingLogHandler.Line] { lines.withLock { $0 }.filter { $0.message.contains("unanswered") } }

        let answered = EmbeddedChannel(handler: FastPathHandler(answers: api.memory, logger: logger))
        try answered.writeInbound(HTTPRequestPart.head(put))
        try answered.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        try answered.writeOutbound(HTTPResponsePart.end(nil))
        try await answered.close().get()
        #expect(warnings().isEmpty)

        let cut = EmbeddedChannel(handler: FastPathHandler(answers: api.memory, logger: logger))
        try cut.writeInbound(HTTPRequestPart.head(put))
        try await cut.close().get()
        let said = warnings()
        #expect(said.count == 1 && said.first?.level == .warning && said.first?.metadata["path"] == "/v1/collections/items/records/a"
            && said.first?.metadata["method"] == "PUT", "\(said)")
        await api.shutdown()
    }
}
