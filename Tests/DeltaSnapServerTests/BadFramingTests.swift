import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
@testable import DeltaSnapServer
import DeltaSnapTestSupport
import Foundation
import Testing

/// Requests whose body framing is broken are the client's mistake: a 4xx with a JSON body
/// (or a closed connection), never a 500, nothing committed, and the server keeps serving.
@Suite struct BadFramingTests {
    func withServer(_ body: @escaping @Sendable (TestServer, SQLiteDatabase) async throws -> Void) async throws {
        try await TestServer.with(
            seed: { try Fixtures.importText(#"{"id":"a","v":1}"#, into: try SQLiteDatabase(path: $0), collection: "items") },
            start: { try await TestServer.start(database: $0, maximumWriteBodyBytes: 64 * 1024) }
        ) { server, db in try await body(server, try SQLiteDatabase(path: db)) }
    }

    static let auth = "Authorization: Bearer \(TestServer.writeToken)\r\n"

    static let cases: [(name: String, request: String)] = [
        ("a Content-Length longer than the body", "PUT /v1/collections/items/records/a HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: 100\r\n\r\n{\"v\":2}"),
        ("a push body that stops early", "POST /v1/collections/items/mutations HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: 500\r\n\r\n{\"client\":\"c\",\"mutations\":["),
        ("a chunked body that stops early", "POST /v1/collections/items/records HTTP/1.1\r\nHost: x\r\n\(auth)Transfer-Encoding: chunked\r\n\r\n10\r\n{\"id\":\"b\"}"),
        ("a Content-Length far above the limit", "POST /v1/collections/items/records HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: 99999999999\r\n\r\n{}"),
    ]

    /// Requests no client should send, each answered below 500 (or the connection closed).
    static let hostile: [(name: String, request: [UInt8])] = {
        func raw(_ text: String) -> [UInt8] { Array(text.utf8) }
        let huge = String(repeating: "x", count: 100_000)
        return [
            ("invalid UTF-8 in the path", raw("GET /v1/collections/") + [0xFF, 0xFE] + raw(" HTTP/1.1\r\nHost: x\r\n\r\n")),
            ("percent-encoded invalid UTF-8 in the path", raw("GET /v1/collections/%FF%FE HTTP/1.1\r\nHost: x\r\n\r\n")),
            ("invalid UTF-8 in a record id", raw("PUT /v1/collections/items/records/%FF HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: 2\r\n\r\n{}")),
            ("invalid UTF-8 in If-None-Match", raw("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"") + [0xFF, 0xC3] + raw("\"\r\n\r\n")),
            ("a 100 kB If-None-Match", raw("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"\(huge)\"\r\n\r\n")),
            ("a malformed If-Modified-Since", raw("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: yesterday-ish\r\n\r\n")),
            ("a list of 2,000 validators", raw("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: " + (0..<2000).map { "\"t\($0)\"" }.joined(separator: ", ") + "\r\n\r\n")),
            ("an unknown method", raw("FROBNICATE /v1/collections/items HTTP/1.1\r\nHost: x\r\n\r\n")),
            ("a push with invalid UTF-8 in its JSON", raw("POST /v1/collections/items/mutations HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: 50\r\n\r\n{\"client\":\"c\",\"mutations\":[{\"seq\":1,\"op\":\"") + [0xFF] + raw("\"}]}")),
            ("a header line without a colon", raw("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nthis is not a header\r\n\r\n")),
            ("a NUL byte in a header value", raw("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"a") + [0] + raw("b\"\r\n\r\n")),
            ("an unknown HTTP version", raw("GET /v1/collections/items HTTP/7.3\r\nHost: x\r\n\r\n")),
            ("a request line of garbage", raw("\u{1}\u{2}\u{3} nonsense\r\n\r\n")),
            ("two different Content-Lengths", raw("PUT /v1/collections/items/records/a HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: 7\r\nContent-Length: 9\r\n\r\n{\"v\":2}")),
            ("Content-Length with Transfer-Encoding", raw("PUT /v1/collections/items/records/a HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n{\"v\":2}\r\n0\r\n\r\n")),
            ("a negative Content-Length", raw("PUT /v1/collections/items/records/a HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: -7\r\n\r\n{\"v\":2}")),
            ("an invalid chunk size", raw("POST /v1/collections/items/records HTTP/1.1\r\nHost: x\r\n\(auth)Transfer-Encoding: chunked\r\n\r\nzz\r\n{\"id\":\"b\"}\r\n0\r\n\r\n")),
            ("a bearer token of 50 kB", raw("POST /v1/collections/items/mutations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(huge.prefix(50_000))\r\nContent-Length: 2\r\n\r\n{}")),
        ]
    }()

    @Test(arguments: 0..<hostile.count)
    func hostileRequestsAreNeverAnswered500(_ index: Int) async throws {
        let (name, request) = Self.hostile[index]
        try await withServer { server, store in
            let before = try store.head(of: "items")
            let response = try await offPool { try server.connect().sendRaw(request, halfClose: true) }
            if let response {
                #expect(response.status < 500, "\(name): \(response.status) \(response.text)")
                // The JSON error body even for what the HTTP parser refuses (bytes that are not
                // HTTP), which also closes the connection (RFC 9112 §11.2).
                if response.status >= 400 {
                    #expect(response.header("Content-Type") == "application/json", "\(name): \(response.headers)")
                    let json = try? JSONReader(bytes: response.body).readValue()
                    if case .string(let code)? = json?["error"] {
                        if code == "malformed_request" { #expect(response.header("Connection") == "close", "\(name)") }
                    } else {
                        Issue.record("\(name): no JSON error body: \(response.text)")
                    }
                }
            }
            #expect(try store.head(of: "items") == before, "\(name): something was committed")
            let next = try await offPool { try server.connect().request("GET", "/v1/collections/items") }
            #expect(next.status == 200, "\(name): the server stopped serving")
        }
    }

    @Test(arguments: 0..<cases.count)
    func brokenBodiesAreNeverAnswered500(_ index: Int) async throws {
        let (name, request) = Self.cases[index]
        try await withServer { server, store in
            let before = try store.head(of: "items")
            let response = try await offPool { try server.connect().sendRaw(Array(request.utf8), halfClose: true) }
            if let response {
                #expect((400...499).contains(response.status), "\(name): \(response.status) \(response.text)")
                #expect(response.header("Content-Type") == "application/json", "\(name)")
            }
            #expect(try store.head(of: "items") == before, "\(name): something was committed")
            let next = try await offPool { try server.connect().request("GET", "/v1/collections/items") }
            #expect(next.status == 200, "\(name): the server stopped serving")
        }
    }

    /// A malformed request pipelined behind a held `GET /v1/index?wait=` ends the wait first:
    /// the held request gets its own answer ("no change"), then the malformed one its `400`
    /// (before, the `400` went out alone and read as the held request's answer).
    @Test func aMalformedRequestBehindAHeldWaitComesAfterItsAnswer() async throws {
        try await withServer { server, _ in
            let etag = try await offPool { try server.connect().request("GET", "/v1/index") }.header("ETag") ?? ""
            let (held, refused) = try await offPool {
                let client = try server.connect()
                try client.sendBytes(Array("GET /v1/index?wait=20 HTTP/1.1\r\nHost: x\r\nIf-None-Match: \(etag)\r\n\r\n".utf8))
                // Held (bounded), then the bytes that are no request.
                let deadline = Date().addingTimeInterval(10)
                while server.service.waiters.count == 0, Date() < deadline { usleep(5_000) }
                try client.sendBytes(Array("\u{1}\u{2} nonsense\r\n\r\n".utf8))
                return (try client.nextResponse(), try client.nextResponse())
            }
            #expect(held.status == 304 && held.header("ETag") == etag, "\(held.status) \(held.headers)")
            #expect(refused.status == 400 && refused.header("Connection") == "close" && refused.text.contains("malformed_request"), "\(refused.status) \(refused.text)")
        }
    }
}
