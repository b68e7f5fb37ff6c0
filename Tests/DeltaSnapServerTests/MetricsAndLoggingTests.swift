import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Logging
import Testing

/// What an operator reads: `/metrics` in the Prometheus text format (swift-metrics through
/// swift-prometheus), one log line per request, and the request id that ties them to a client.
@Suite struct MetricsAndLoggingTests {
    func withServer(
        logNotModified: Bool = false,
        _ body: @escaping @Sendable (TestServer, String, CapturingLogHandler.Lines) async throws -> Void
    ) async throws {
        let lines = CapturingLogHandler.Lines([])
        var logger = Logger(label: "test-server") { _ in CapturingLogHandler(lines: lines) }
        logger.logLevel = .info
        try await TestServer.with(
            seed: { try Fixtures.importText(Fixtures.ndjson(0..<20), into: try SQLiteDatabase(path: $0), collection: "items") },
            start: { try await TestServer.start(database: $0, logNotModified: logNotModified, logger: logger) }
        ) { server, db in try await body(server, db, lines) }
    }

    func get(_ server: TestServer, _ path: String = "/v1/collections/items", _ headers: [String: String] = [:]) async throws -> RawHTTPClient.Response {
        try await offPool { try server.connect().request("GET", path, headers: headers) }
    }

    /// The value of one sample line of the exposition text, e.g. `name{labels} 3`.
    func sample(_ text: String, _ series: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    @Test func metricsCountEachOutcomeWithLatencyHistograms() async throws {
        try await withServer { server, db, _ in
            let full = try await get(server, "/v1/collections/items", ["Accept-Encoding": "gzip"])
            let etag = try #require(full.header("ETag"))
            for _ in 0..<3 { #expect(try await get(server, "/v1/collections/items", ["If-None-Match": etag]).status == 304) }
            try Fixtures.importText(Fixtures.ndjson(0..<2, revision: 1), into: try SQLiteDatabase(path: db), collection: "items")
            var delta = try await get(server, "/v1/collections/items", ["If-None-Match": etag])
            for _ in 0..<100 where delta.status == 304 {
                try await Task.sleep(for: .milliseconds(20))
                delta = try await get(server, "/v1/collections/items", ["If-None-Match": etag])
            }
            #expect(delta.status == 200)
            #expect(try await get(server, "/v1/collections/nope").status == 404)

            let metrics = try await get(server, "/metrics", ["Authorization": "Bearer \(TestServer.writeToken)"])
            #expect(metrics.status == 200)
            #expect(metrics.header("Content-Type")?.hasPrefix("text/plain") == true)
            let text = metrics.text
            #expect(text.contains("# TYPE deltasnap_collection_responses_total counter"))
            #expect(sample(text, #"deltasnap_collection_responses_total{outcome="full"}"#) == 1)
            #expect(sample(text, #"deltasnap_collection_responses_total{outcome="delta"}"#) == 1)
            let notModified = try #require(sample(text, #"deltasnap_collection_responses_total{outcome="not_modified"}"#))
            #expect(notModified >= 3)
            #expect(sample(text, #"deltasnap_http_responses_total{route="/v1/collections/{name}",status="404"}"#) == 1)
            #expect(sample(text, #"deltasnap_body_bytes_sent_total{outcome="full"}"#) == Double(full.body.count))
            #expect(sample(text, #"deltasnap_body_bytes_sent_total{outcome="delta"}"#) == Double(delta.body.count))
            // One histogram per outcome, its count the outcome's count, its buckets cumulative.
            #expect(text.contains("# TYPE deltasnap_collection_response_duration_seconds histogram"))
            #expect(sample(text, #"deltasnap_collection_response_duration_seconds_count{outcome="not_modified"}"#) == notModified)
            #expect(sample(text, #"deltasnap_collection_response_duration_seconds_count{outcome="full"}"#) == 1)
            #expect(sample(text, #"deltasnap_collection_response_duration_seconds_bucket{outcome="not_modified",le="+Inf"}"#) == notModified)
            let fastest = try #require(sample(text, #"deltasnap_collection_response_duration_seconds_bucket{outcome="not_modified",le="5e-05"}"#)
                ?? sample(text, #"deltasnap_collection_response_duration_seconds_bucket{outcome="not_modified",le="0.00005"}"#))
            #expect(fastest <= notModified)
        }
    }

    @Test func everyAnswerCarriesARequestIDAndTheClientsOwnIsEchoed() async throws {
        try await withServer { server, _, _ in
            let first = try #require(try await get(server).header("X-Request-Id"))
            let second = try #require(try await get(server).header("X-Request-Id"))
            #expect(!first.isEmpty && first != second)
            #expect(try await get(server, "/v1/collections/items", ["X-Request-Id": "app-42.retry:1"]).header("X-Request-Id") == "app-42.retry:1")
            // Errors carry one too.
            #expect(try await get(server, "/v1/collections/nope", ["X-Request-Id": "e1"]).header("X-Request-Id") == "e1")
            // An unlogged 304 carries the client's own id only: the hot path adds nothing else.
            let etag = try #require(try await get(server).header("ETag"))
            let poll = try await get(server, "/v1/collections/items", ["If-None-Match": etag, "X-Request-Id": "poll-7"])
            #expect(poll.status == 304 && poll.header("X-Request-Id") == "poll-7")
            let anonymous = try await get(server, "/v1/collections/items", ["If-None-Match": etag])
            #expect(anonymous.status == 304 && anonymous.header("X-Request-Id") == nil)
            // What could forge a log line, or floods it, is replaced by the server's own id.
            for hostile in ["two words", "quote\"d", String(repeating: "x", count: 129), "tab\there"] {
                let echoed = try await get(server, "/v1/collections/items", ["X-Request-Id": hostile]).header("X-Request-Id")
                #expect(echoed != nil && echoed != hostile, "\(hostile)")
            }
        }
    }

    @Test func eachRequestLogsOneLineWithItsIDButNot304sUnlessAsked() async throws {
        try await withServer { server, _, lines in
            let full = try await get(server, "/v1/collections/items", ["X-Request-Id": "full-1", "Accept-Encoding": "gzip"])
            #expect(try await get(server, "/v1/collections/items", ["X-Request-Id": "plain-1"]).status == 200)
            let etag = try #require(full.header("ETag"))
            #expect(try await get(server, "/v1/collections/items", ["If-None-Match": etag, "X-Request-Id": "poll-1"]).status == 304)
            #expect(try await get(server, "/v1/collections/nope", ["X-Request-Id": "missing-1"]).status == 404)
            let logged = lines.current.filter { $0.message == "request" }
            let byID = Dictionary(grouping: logged, by: { $0.metadata["request_id"] ?? "" })
            let fullLine = try #require(byID["full-1"]?.first)
            #expect(byID["full-1"]?.count == 1)
            #expect(fullLine.level == .info)
            #expect(fullLine.metadata["status"] == "200" && fullLine.metadata["method"] == "GET")
            #expect(fullLine.metadata["path"] == "/v1/collections/items")
            #expect(fullLine.metadata["bytes"] == String(full.body.count))
            #expect(fullLine.metadata["duration_ms"].flatMap(Double.init) != nil)
            // An identity body is streamed from the database: its length is not known up front.
            #expect(byID["plain-1"]?.first?.metadata["bytes"] == "streamed")
            #expect(byID["missing-1"]?.first?.metadata["status"] == "404")
            #expect(byID["poll-1"] == nil, "a 304 was logged without --log-not-modified")
        }
        try await withServer(logNotModified: true) { server, _, lines in
            let etag = try #require(try await get(server).header("ETag"))
            #expect(try await get(server, "/v1/collections/items", ["If-None-Match": etag, "X-Request-Id": "poll-2"]).status == 304)
            let polls = lines.current.filter { $0.message == "request" && $0.metadata["request_id"] == "poll-2" }
            #expect(polls.count == 1 && polls.first?.metadata["status"] == "304")
            // Logged 304s carry the id they are logged under, made by the server if need be.
            let anonymous = try await get(server, "/v1/collections/items", ["If-None-Match": etag])
            let id = try #require(anonymous.header("X-Request-Id"))
            #expect(lines.current.contains { $0.metadata["request_id"] == id && $0.metadata["status"] == "304" })
        }
    }
}
