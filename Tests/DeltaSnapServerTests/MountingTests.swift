import DeltaSnapSQLiteStore
@testable import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Hummingbird
import Logging
import Testing

/// DeltaSnap mounted in someone else's Hummingbird app: its middleware wraps its own routes
/// only, so the host's answers and 404s come out exactly as the host wrote them.
@Suite struct MountingTests {
    @Test func aHostAppKeepsItsOwnRoutesAndNotFoundAnswers() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteCollectionStore(path: dir.file("s.sqlite"))
        _ = try await store.importBatch(Array(Fixtures.ndjson(0..<3).utf8), into: "items")
        let api = try await DeltaSnapAPI(store: store, configuration: .init(writeToken: "operator"))
        let router = Router()
        router.get("/hello") { _, _ in "hi from the host" }
        router.get("/boom") { _, _ -> String in throw HTTPError(.badRequest, message: "the host's own error") }
        router.addRoutes(api.routes())
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        var quiet = Logger(label: "host")
        quiet.logLevel = .warning
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) }, logger: quiet)
        let running = Task { try await DeltaSnapServer.runUntilCancelled([app], logger: quiet) }
        defer { running.cancel() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        let client = try RawHTTPClient(port: port)

        let hello = try await client.request("GET", "/hello", headers: ["X-Request-Id": "host-1"])
        #expect(hello.status == 200 && hello.text == "hi from the host")
        #expect(hello.header("X-Request-Id") == nil)  // DeltaSnap's middleware stayed off the host's route

        let missing = try await client.request("GET", "/nothing-here")
        #expect(missing.status == 404)
        #expect(missing.header("X-Request-Id") == nil && !missing.text.contains("\"error\""))

        let hostError = try await client.request("GET", "/boom")
        #expect(hostError.status == 400 && !hostError.text.contains("\"error\":\"http_400\""))

        // DeltaSnap's own routes keep their JSON errors, ids and metrics.
        let served = try await client.request("GET", "/v1/collections/items")
        #expect(served.status == 200 && served.header("X-Request-Id") != nil)
        let unknown = try await client.request("GET", "/v1/collections/nope")
        #expect(unknown.status == 404 && unknown.text.contains(#""error":"unknown_collection""#))
        let metrics = try await client.request("GET", "/metrics", headers: ["Authorization": "Bearer operator"]).text
        #expect(metrics.contains(#"route="/v1/collections/{name}",status="404"} 1"#))
        #expect(!metrics.contains("/hello") && !metrics.contains("unmatched"))
    }
}

extension MountingTests {
    /// An app that mounts DeltaSnap with ``DeltaSnapAPI/httpServer(logger:)`` answers exactly
    /// as `serve` does — the raw-bytes `304`, the fast path's delta, the router's full body,
    /// the index — status, headers (but `Date`) and body byte for byte.
    @Test func anEmbeddedServerAnswersAsServeDoes() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("s.sqlite")
        let seeding = try SQLiteCollectionStore(path: path)
        let first = try await seeding.importBatch(Array(Fixtures.ndjson(0..<20).utf8), into: "items")
        _ = try await seeding.importBatch(Array(Fixtures.ndjson(0..<3, revision: 1).utf8), into: "items")
        await seeding.close()
        let old = "\"\(try #require(first.head).token)\""

        var quiet = Logger(label: "embedded")
        quiet.logLevel = .warning
        let api = try await DeltaSnapAPI(store: try SQLiteCollectionStore(path: path))
        let router = Router()
        router.get("/hello") { _, _ in "hi" }
        router.addRoutes(api.routes())
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router, server: api.httpServer(logger: quiet), configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) }, logger: quiet)
        let running = Task { try await DeltaSnapServer.runUntilCancelled([app], logger: quiet) }
        defer { running.cancel() }
        var iterator = ports.makeAsyncIterator()
        let embeddedPort = try #require(await iterator.next())
        let serve = try await TestServer.start(database: path, writeToken: nil)
        try await serve.stopping {
            let current = try await offPool { try serve.connect().request("GET", "/v1/collections/items").header("ETag") }
            let requests: [(String, [String: String])] = [
                ("/v1/collections/items", [:]),
                ("/v1/collections/items", ["If-None-Match": current ?? ""]),
                ("/v1/collections/items", ["If-None-Match": old, "Accept-Encoding": "gzip"]),
                ("/v1/collections/items", ["If-None-Match": old]),
                ("/v1/collections/nope", [:]),
                ("/v1/index", [:]),
                ("/healthz", [:]),
            ]
            for (path, headers) in requests {
                let sent = headers.merging(["X-Request-Id": "same-id"]) { $1 }
                // Twice each: the second answer may come from a cache the first filled.
                for _ in 0..<2 {
                    let embedded = try await offPool { try RawHTTPClient(port: embeddedPort).request("GET", path, headers: sent) }
                    let served = try await offPool { try serve.connect().request("GET", path, headers: sent) }
                    let what = "GET \(path) \(headers)"
                    #expect(embedded.status == served.status, "\(what)")
                    // Two servers sign their index when each is first asked: in seconds that
                    // differ on a loaded machine, so its times (and its ETag) may differ.
                    let timed = path == "/v1/index"
                    #expect(Self.withoutDate(embedded.headers, timed: timed) == Self.withoutDate(served.headers, timed: timed), "\(what)")
                    #expect(Self.untimed(embedded.body, timed: timed) == Self.untimed(served.body, timed: timed), "\(what)")
                }
            }
            let metrics = api.metrics.registry.emitToBuffer()
            #expect(String(decoding: metrics, as: UTF8.self).contains("deltasnap_fast_path_responses_total "), "the fast path answered the embedded polls")
        }
    }

    /// The headers but `Date` (and, for a `timed` answer, its `ETag`), as lines.
    static func withoutDate(_ headers: [(String, String)], timed: Bool = false) -> [String] {
        headers.filter { $0.0.lowercased() != "date" && !(timed && $0.0.lowercased() == "etag") }.map { "\($0.0.lowercased()): \($0.1)" }
    }

    /// A body with, for a `timed` one (an index), its `issued` and `expires` numbers blanked.
    static func untimed(_ body: [UInt8], timed: Bool) -> String {
        let text = String(decoding: body, as: UTF8.self)
        guard timed else { return text }
        return text.replacingOccurrences(of: #""(issued|expires)":[0-9]+"#, with: #""$1":0"#, options: .regularExpression)
    }
}
