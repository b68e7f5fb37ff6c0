import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// The collection endpoint on a real server on 127.0.0.1, spoken to over a raw socket.
@Suite struct CollectionEndpointTests {
    /// A store with 300 synthetic records in "items" (version 1), and a server on it.
    func withServer(_ body: @escaping @Sendable (TestServer, String) async throws -> Void) async throws {
        try await TestServer.with(seed: { try Fixtures.importText(Fixtures.ndjson(0..<300), into: try SQLiteDatabase(path: $0), collection: "items") }, body)
    }

    func get(_ server: TestServer, _ path: String = "/v1/collections/items", _ headers: [String: String] = [:]) async throws -> RawHTTPClient.Response {
        try await offPool { try server.connect().request("GET", path, headers: headers) }
    }

    func body(_ response: RawHTTPClient.Response) throws -> (BodyHeader, [Record]) {
        let reader = BodyReader(bytes: try response.decodedBody())
        let header = try reader.readHeader()
        var records: [Record] = []
        while let record = try reader.nextRecord() { records.append(record) }
        return (header, records)
    }

    @Test(arguments: [
        ("gzip", true), ("x-gzip", true), ("*", true), ("identity", false), ("gzip;q=0", false), ("gzip;q=0, *", false),
        ("gzip; q=0.5", true), ("br, gzip;q=0.1", true), ("*;q=0", false), ("identity, *;q=0.3", true), ("", false),
        ("gzip, deflate, br", true), (" GZip ,br", true), ("deflate, br", false), ("xgzip", false), ("gzipx, br", false), (",,", false),
    ])
    func acceptEncodingNegotiatesGzip(header: String, gzip: Bool) {
        #expect(DeltaSnapAPI.acceptsGzip([header]) == gzip, "\(header)")
    }

    @Test func fullBodyInGzipAndIdentityDecodeToTheSameJSONAndCarryTheHeaders() async throws {
        try await withServer { server, db in
            let gzip = try await get(server, "/v1/collections/items", ["Accept-Encoding": "gzip"])
            let identity = try await get(server, "/v1/collections/items", ["Accept-Encoding": "identity"])
            #expect(gzip.status == 200 && identity.status == 200)
            #expect(gzip.header("Content-Encoding") == "gzip" && identity.header("Content-Encoding") == nil)
            #expect(try gzip.decodedBody() == identity.body)
            let head = try #require(try SQLiteDatabase(path: db).head(of: "items"))
            for response in [gzip, identity] {
                #expect(response.header("ETag") == "\"\(head.token)\"")
                #expect(response.header("Last-Modified") == head.lastModified)
                #expect(response.header("Cache-Control") == "no-cache")
                #expect(response.header("Vary") == "Accept-Encoding, If-None-Match, If-Modified-Since")
                #expect(response.header("Content-Type") == "application/json")
            }
            let (header, records) = try body(identity)
            #expect(header.kind == .full && header.count == 300 && records.count == 300)
            #expect(header.checksum == head.checksum)
            // The cached gzip body is the snapshot bake writes for the same state.
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            try await Fixtures.bake(db, "items", into: dir.path)
            #expect(gzip.body == [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("items.snapshot")))))
        }
    }

    @Test func currentTokenGets304OnAConnectionThatStaysAlive() async throws {
        try await withServer { server, _ in
            let results = try await offPool { () -> [RawHTTPClient.Response] in
                let connection = try server.connect()
                let first = try connection.request("GET", "/v1/collections/items", headers: ["Accept-Encoding": "gzip"])
                let etag = first.header("ETag") ?? ""
                return try [first] + (0..<5).map { _ in
                    try connection.request("GET", "/v1/collections/items", headers: ["If-None-Match": etag, "Accept-Encoding": "gzip"])
                }
            }
            #expect(results[0].status == 200)
            for response in results.dropFirst() {
                #expect(response.status == 304 && response.body.isEmpty)
                #expect(response.header("ETag") == results[0].header("ETag"))
                #expect(response.header("Last-Modified") == results[0].header("Last-Modified"))
            }
        }
    }

    @Test func olderTokenGetsOnlyChangedAndHiddenRecordsOnThatBase() async throws {
        try await withServer { server, db in
            let first = try await get(server)
            let etag = try #require(first.header("ETag"))
            let store = try SQLiteDatabase(path: db)
            try Fixtures.importText(
                #"{"id":"r0000001","changed":true}"# + "\n" + #"{"id":"r0000002","hidden":true}"# + "\n" + #"{"id":"new","x":1}"#,
                into: store, collection: "items")
            try await waitForHead(server, version: 2)
            let delta = try await get(server, "/v1/collections/items", ["If-None-Match": etag, "Accept-Encoding": "gzip"])
            #expect(delta.status == 200 && delta.header("Content-Encoding") == "gzip")
            let (header, records) = try body(delta)
            #expect(header.kind == .delta)
            #expect(header.base == String(etag.dropFirst().dropLast()))
            #expect(delta.header("ETag") == "\"\(header.token)\"")
            #expect(header.checksum == (try store.head(of: "items"))?.checksum)
            #expect(Set(records.map(\.text)) == [#"{"changed":true,"id":"r0000001"}"#, #"{"hidden":true,"id":"r0000002"}"#, #"{"id":"new","x":1}"#])
            #expect(header.count == 3)
        }
    }

    @Test func aCachedDeltaIsNeverServedPastItsHead() async throws {
        try await withServer { server, db in
            let etag = try #require(try await get(server).header("ETag"))
            let store = try SQLiteDatabase(path: db)
            try Fixtures.importText(#"{"id":"first","v":1}"#, into: store, collection: "items")
            try await waitForHead(server, version: 2)
            let one = try await get(server, "/v1/collections/items", ["If-None-Match": etag, "Accept-Encoding": "gzip"])
            let two = try await get(server, "/v1/collections/items", ["If-None-Match": etag, "Accept-Encoding": "gzip"])
            #expect(one.body == two.body && one.header("ETag") == two.header("ETag"))
            #expect(try body(one).1.map(\.id) == ["first"])
            // A newer head: the same old token now gets a delta with both changes.
            try Fixtures.importText(#"{"id":"second","v":1}"#, into: store, collection: "items")
            try await waitForHead(server, version: 3)
            let three = try await get(server, "/v1/collections/items", ["If-None-Match": etag, "Accept-Encoding": "gzip"])
            let (header, records) = try body(three)
            #expect(Set(records.map(\.id)) == ["first", "second"])
            #expect(three.header("ETag") == "\"\(header.token)\"" && header.token.hasSuffix(".3"))
        }
    }

    @Test func tokenAheadOtherEpochAndGarbage() async throws {
        try await withServer { server, db in
            let head = try #require(try SQLiteDatabase(path: db).head(of: "items"))
            let ahead = try await get(server, "/v1/collections/items", ["If-None-Match": "\"\(head.epoch).\(head.version + 5)\""])
            #expect(ahead.status == 304)
            for tag in ["\"0123456789abcdef.1\"", "\"garbage\"", "nonsense", "\"\(head.epoch).0x\""] {
                let response = try await get(server, "/v1/collections/items", ["If-None-Match": tag])
                #expect(response.status == 200, "\(tag)")
                #expect(try body(response).0.kind == .full, "\(tag)")
            }
        }
    }

    @Test func ifModifiedSinceFromCurlIsInclusiveAndIfNoneMatchWins() async throws {
        try await withServer { server, db in
            let head = try #require(try SQLiteDatabase(path: db).head(of: "items"))
            let url = "\(server.baseURL)/v1/collections/items"
            // `curl -z DATE` sends If-Modified-Since. (curl then also applies the condition on
            // its own side and reports 304 for a 200 whose Last-Modified is not newer, so the
            // status line the server sent is read from the dumped headers.)
            // The head's own second: resent (inclusive), as a full body since version 1 is the
            // whole history.
            let same = try await offPool { try curl(["-s", "-D", "-", "-o", "/dev/null", "-z", head.lastModified, url]) }
            #expect(same.hasPrefix("HTTP/1.1 200"), "\(same)")
            let later = try await offPool { try curl(["-s", "-D", "-", "-o", "/dev/null", "-z", HTTPDate.format(head.committedAt + 1), url]) }
            #expect(later.hasPrefix("HTTP/1.1 304"), "\(later)")
            // A second version in a later second: a date at that second gets exactly its changes.
            try await untilTheNextSecond()
            try Fixtures.importText(#"{"id":"r0000005","v":2}"#, into: try SQLiteDatabase(path: db), collection: "items")
            try await waitForHead(server, version: 2)
            let v2 = try #require(try SQLiteDatabase(path: db).head(of: "items"))
            let delta = try await get(server, "/v1/collections/items", ["If-Modified-Since": v2.lastModified])
            let (header, records) = try body(delta)
            #expect(header.kind == .delta && records.map(\.id) == ["r0000005"])
            #expect(header.base == "\(head.epoch).1")
            // An invalid date is ignored: full. If-None-Match wins over If-Modified-Since.
            #expect(try body(try await get(server, "/v1/collections/items", ["If-Modified-Since": "yesterday"])).0.kind == .full)
            let both = try await get(server, "/v1/collections/items", ["If-None-Match": "\"\(v2.token)\"", "If-Modified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"])
            #expect(both.status == 304)
            let both2 = try await get(server, "/v1/collections/items", ["If-None-Match": "\"garbage\"", "If-Modified-Since": HTTPDate.format(v2.committedAt + 10)])
            #expect(both2.status == 200)
        }
    }

    @Test func headAndCollectionListAndErrors() async throws {
        try await withServer { server, db in
            let head = try await offPool { try server.connect().request("HEAD", "/v1/collections/items") }
            #expect(head.status == 200 && head.header("ETag") != nil)
            let list = try await get(server, "/v1/collections")
            let stored = try #require(try SQLiteDatabase(path: db).head(of: "items"))
            #expect(list.text == #"{"collections":[{"checksum":"\#(stored.checksum)","count":300,"lastModified":"\#(stored.lastModified)","name":"items","token":"\#(stored.token)"}]}"# + "\n")

            // Every route's error body and method answers: RouterLevelTests (no socket needed).
            // Here what only the server answers: a path outside every route.
            let cases: [(String, String, Int, String)] = [
                ("GET", "/v1/collections/nope", 404, "unknown_collection"),
                ("GET", "/nowhere", 404, "not_found"),
            ]
            for (method, path, status, code) in cases {
                let response = try await offPool { try server.connect().request(method, path) }
                #expect(response.status == status, "\(method) \(path)")
                #expect(response.header("Content-Type") == "application/json", "\(method) \(path)")
                let json = try JSONReader(bytes: response.body).readValue()
                #expect(json["error"] == .string(code), "\(method) \(path)")
                if case .string(let message)? = json["message"] { #expect(!message.isEmpty) } else { Issue.record("no message") }
            }
            let metrics = try await server.metricsText()
            #expect(metrics.contains("deltasnap_collection_responses_total{outcome=\"full\"}"))
            #expect(metrics.contains("deltasnap_http_responses_total{route=\"/v1/collections/{name}\",status=\"404\"} 1"))
        }
    }

    /// Streamed bodies return their pooled connection when done; a statement finalised after
    /// that raced the next request on the connection and crashed the server (SIGSEGV).
    @Test(.timeLimit(.minutes(1)))
    func concurrentStreamedBodiesShareConnectionsSafely() async throws {
        try await withServer { server, db in
            let etag = try #require(try await get(server).header("ETag"))
            try Fixtures.importText(Fixtures.ndjson(0..<12, revision: 1), into: try SQLiteDatabase(path: db), collection: "items")
            try await waitForHead(server, version: 2)
            try await withThrowingTaskGroup(of: Int.self) { group in
                for worker in 0..<8 {
                    group.addTask {
                        try await offPool {
                            let connection = try server.connect()
                            var ok = 0
                            for round in 0..<150 {
                                // Deltas (gzip) and identity full bodies: both stream from SQLite.
                                let headers = (worker + round) % 3 == 0 ? ["Accept-Encoding": "identity"] : ["If-None-Match": etag, "Accept-Encoding": "gzip"]
                                if try connection.request("GET", "/v1/collections/items", headers: headers).status == 200 { ok += 1 }
                            }
                            return ok
                        }
                    }
                }
                var total = 0
                for try await ok in group { total += ok }
                #expect(total == 8 * 150)
            }
        }
    }

    @Test func importsByAnotherProcessAreServedWithoutARestart() async throws {
        try await withServer { server, db in
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let file = try dir.write("more.ndjson", #"{"id":"from-cli","x":1}"#)
            let result = try await offPool { try CLI.runBlocking(["import", "--db", db, "--collection", "items", file]) }
            #expect(result.status == 0)
            try await waitForHead(server, version: 2)
            let list = try await get(server, "/v1/collections")
            #expect(list.text.contains("\"count\":301"))
        }
    }
}

/// Waits (bounded) until the server's in-memory head reaches `version`.
func waitForHead(_ server: TestServer, version: UInt64, collection: String = "items") async throws {
    let reached = try await eventually(within: .seconds(4)) {
        let etag = try await offPool { try server.connect().request("HEAD", "/v1/collections/\(collection)") }.header("ETag")
        return etag.flatMap { ServerToken($0.dropFirst().dropLast()) }.map { $0.version >= version } ?? false
    }
    if !reached { Issue.record("the server never reached version \(version)") }
}

/// Runs curl and returns its standard output.
func curl(_ arguments: [String]) throws -> String {
    let process = try Spawned("/usr/bin/curl", arguments, stdout: .pipe, stderr: .discard)
    let data = process.output?.readDataToEndOfFile() ?? Data()
    process.wait()
    return String(decoding: data, as: UTF8.self)
}
