import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Consistent paging over a version (`…/snapshots/{token}?limit=N&after=ID`, PROTOCOL.md
/// §8.6) against a real server on 127.0.0.1: a version's pages never shift while writes go on.
@Suite struct PagingTests {
    struct Page: Decodable {
        var collection: String
        var token: String
        var count: Int
        var next: String?
    }

    /// Every page of `token`, `limit` at a time, on one connection: the records' lines and
    /// how many pages it took.
    static func pageThrough(_ server: TestServer, _ base: String, token: String, limit: Int) async throws -> (records: [String], pages: Int) {
        try await offPool {
            let client = try server.connect()
            var records: [String] = []
            var after: String?
            var pages = 0
            repeat {
                let query = "limit=\(limit)" + (after.map { "&after=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)" } ?? "")
                let response = try client.request("GET", "\(base)/snapshots/\(token)?\(query)")
                guard response.status == 200 else { throw RawHTTPClient.Failure(description: "page \(pages): \(response.status) \(response.text)") }
                let page = try JSONDecoder().decode(Page.self, from: Data(response.body))
                guard page.token == token else { throw RawHTTPClient.Failure(description: "a page of \(page.token), not \(token)") }
                let lines = response.text.split(separator: "\n").dropFirst().dropLast()
                records += lines.map { String($0.hasSuffix(",") ? $0.dropLast() : $0) }
                after = page.next
                pages += 1
            } while after != nil
            return (records, pages)
        }
    }

    @Test(arguments: TestBackend.allCases) func aThousandWritesWhileAClientPagesThroughTenThousandRecordsShiftNothing(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(backend, in: dir)
        try await store.importText(Fixtures.ndjson(0..<10_000), collection: "items")
        let before = try await store.export("items")
        let token = try #require(try await store.head(of: "items")).token.description
        let server = try await TestServer.start(database: store.url)
        try await server.stopping {
            // The first page pins the version; then the writes start.
            let first = try await offPool { try server.connect().request("GET", "/v1/collections/items/snapshots/\(token)?limit=1") }
            #expect(first.status == 200 && first.header("Cache-Control") == "public, max-age=31536000, immutable", "\(first.text)")
            async let writes: Int = offPool {
                let client = try server.connect()
                let auth = ["Authorization": "Bearer \(TestServer.writeToken)"]
                var done = 0
                for index in 0..<1_000 {
                    let id = String(format: "r%07d", (index * 37) % 12_000)
                    let response = index % 5 == 0
                        ? try client.request("DELETE", "/v1/collections/items/records/\(id)", headers: auth)
                        : try client.request("PUT", "/v1/collections/items/records/\(id)", headers: auth, body: Array(#"{"written":\#(index)}"#.utf8))
                    if response.status == 200 { done += 1 }
                }
                return done
            }
            let paged = try await Self.pageThrough(server, "/v1/collections/items", token: token, limit: 97)
            #expect(try await writes == 1_000)
            #expect(try await store.head(of: "items")!.token.description != token, "the writes moved the head")
            // Every record of that version exactly once, in id order, byte for byte.
            #expect(paged.records.count == 10_000 && paged.pages == 104)
            #expect(paged.records.joined(separator: "\n") + "\n" == before)
            // Paging again after the writes: the same pages.
            let again = try await Self.pageThrough(server, "/v1/collections/items", token: token, limit: 1_000)
            #expect(again.records == paged.records && again.pages == 10)
        }
        await store.stop()
    }

    /// A version larger than the paging budget is not kept: its pages are read from the store
    /// by their ids (each costs its own size), while it is the head — every record exactly
    /// once, byte for byte — and `404 superseded` once a write moved the head.
    @Test(arguments: TestBackend.allCases) func aVersionLargerThanTheBudgetIsPagedFromTheStore(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(backend, in: dir)
        try await store.importText(Fixtures.ndjson(0..<2_000), collection: "items")
        let exported = try await store.export("items")
        let token = try #require(try await store.head(of: "items")).token.description
        let server = try await TestServer.start(database: store.url, pagingBudgetBytes: 16 * 1024)
        try await server.stopping {
            let paged = try await Self.pageThrough(server, "/v1/collections/items", token: token, limit: 97)
            #expect(paged.records.count == 2_000 && paged.pages == 21)
            #expect(paged.records.joined(separator: "\n") + "\n" == exported)
            let last = try await offPool { try server.connect().request("GET", "/v1/collections/items/snapshots/\(token)?limit=3&after=r9999999") }
            #expect(last.status == 200 && last.text.contains(#""next":null,"records":["#) && !last.text.contains(#""id""#))
            #expect(try await server.adminPut("/v1/collections/items/records/r0000005", #"{"written":1}"#).status == 200)
            let gone = try await offPool { try server.connect().request("GET", "/v1/collections/items/snapshots/\(token)?limit=5") }
            #expect(gone.status == 404 && gone.text.contains(#""error":"superseded""#), "\(gone.text)")
            let head = try #require(try await store.head(of: "items")).token.description
            let again = try await Self.pageThrough(server, "/v1/collections/items", token: head, limit: 1_000)
            #expect(again.records.count == 2_000 && again.pages == 2 && again.records.contains { $0.contains(#""written":1"#) })
        }
        await store.stop()
    }

    @Test func badPagesAreFourHundredsAndAVersionNoLongerKeptIsSuperseded() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(.sqlite, in: dir)
        try await store.importText(Fixtures.ndjson(0..<10), collection: "items")
        let old = try #require(try await store.head(of: "items")).token
        try await store.importText(Fixtures.ndjson(0..<10, revision: 1), collection: "items")
        let head = try #require(try await store.head(of: "items")).token
        let server = try await TestServer.start(database: store.url)
        try await server.stopping {
            func get(_ path: String) async throws -> RawHTTPClient.Response {
                try await offPool { try server.connect().request("GET", path) }
            }
            for limit in ["0", "1001", "x", "-1"] {
                let answer = try await get("/v1/collections/items/snapshots/\(head)?limit=\(limit)")
                #expect(answer.status == 400 && answer.text.contains(#""error":"invalid_limit""#), "\(limit): \(answer.text)")
            }
            let never = try await get("/v1/collections/items/snapshots/\(old)?limit=5")
            #expect(never.status == 404 && never.text.contains(#""error":"superseded""#), "\(never.text)")
            let future = ServerToken(epoch: head.epoch, version: head.version + 5)
            let ahead = try await get("/v1/collections/items/snapshots/\(future)?limit=5")
            #expect(ahead.status == 404 && ahead.text.contains(#""error":"unknown_target""#), "\(ahead.text)")
            #expect(try await get("/v1/collections/items/snapshots/nonsense?limit=5").status == 400)
            // After the last record: an empty page, no next.
            let last = try await get("/v1/collections/items/snapshots/\(head)?limit=5&after=r9999999")
            #expect(last.status == 200 && last.text.contains(#""next":null,"records":["#) && !last.text.contains(#""id""#))
            // Without limit: 100.
            let all = try await get("/v1/collections/items/snapshots/\(head)?after=")
            #expect(all.status == 200 && all.text.components(separatedBy: #""id":"#).count == 11)
        }
        await store.stop()
    }

    @Test func aPartitionIsPagedOnlyByThoseWhoMayReadIt() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(.sqlite, in: dir)
        try await store.importText(Fixtures.ndjson(0..<25), collection: "attempts/alice")
        let token = try #require(try await store.head(of: "attempts/alice")).token
        let secret = "paging-secret"
        let access = AccessPolicy(jwtSecret: secret, rules: try AccessRules(yaml: Fixtures.studyAppRules))
        let server = try await TestServer.start(database: store.url, access: access)
        try await server.stopping {
            func get(as subject: String?) async throws -> RawHTTPClient.Response {
                var headers: [String: String] = [:]
                if let subject {
                    headers["Authorization"] = "Bearer " + (try await AccessClaims(subject: subject, expires: Date().addingTimeInterval(600), write: [], read: []).signed(secret: secret))
                }
                let sent = headers
                return try await offPool { try server.connect().request("GET", "/v1/collections/attempts/partitions/alice/snapshots/\(token)?limit=10", headers: sent) }
            }
            let own = try await get(as: "alice")
            #expect(own.status == 200 && own.header("Cache-Control") == "private, no-store")
            #expect(own.text.contains(#""collection":"attempts/alice""#) && own.text.contains(#""next":"r0000009""#))
            for other in ["bob", nil] {
                let answer = try await get(as: other)
                #expect(answer.status == 404 && answer.text.contains(#""error":"unknown_collection""#), "\(String(describing: other)): \(answer.text)")
            }
        }
        await store.stop()
    }
}
