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

        let hello = try client.request("GET", "/hello", headers: ["X-Request-Id": "host-1"])
        #expect(hello.status == 200 && hello.text == "hi from the host")
        #expect(hello.header("X-Request-Id") == nil)  // DeltaSnap's middleware stayed off the host's route

        let missing = try client.request("GET", "/nothing-here")
        #expect(missing.status == 404)
        #expect(missing.header("X-Request-Id") == nil && !missing.text.contains("\"error\""))

        let hostError = try client.request("GET", "/boom")
        #expect(hostError.status == 400 && !hostError.text.contains("\"error\":\"http_400\""))

        // DeltaSnap's own routes keep their JSON errors, ids and metrics.
        let served = try client.request("GET", "/v1/collections/items")
        #expect(served.status == 200 && served.header("X-Request-Id") != nil)
        let unknown = try client.request("GET", "/v1/collections/nope")
        #expect(unknown.status == 404 && unknown.text.contains(#""error":"unknown_collection""#))
        let metrics = try client.request("GET", "/metrics", headers: ["Authorization": "Bearer operator"]).text
        #expect(metrics.contains(#"route="/v1/collections/{name}",status="404"} 1"#))
        #expect(!metrics.contains("/hello") && !metrics.contains("unmatched"))
    }
}
