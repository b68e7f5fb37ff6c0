import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// `GET /v1/index` and the immutable delta and snapshot URLs (docs/PROTOCOL.md §8), on a real
/// server over a raw socket: what a shared cache may keep, and what it must never keep.
@Suite struct PublicationEndpointTests {
    struct Fixture: @unchecked Sendable {
        let dir: TemporaryDirectory
        let store: SQLiteDatabase
        let server: TestServer
        let key: IndexSigningKey

        func get(_ path: String, _ headers: [String: String] = [:]) async throws -> RawHTTPClient.Response {
            try await offPool { try server.connect().request("GET", path, headers: headers) }
        }

        func token() throws -> String { try #require(try store.head(of: "items")).token.description }

        func commit(_ text: String) async throws {
            try Fixtures.importText(text, into: store, collection: "items")
            let token = try token()
            // A token ahead of the server gets a 304 too: wait for the server's own ETag.
            for _ in 0..<200 {
                let head = try await offPool { try server.connect().request("HEAD", "/v1/collections/items") }
                if head.header("ETag") == "\"\(token)\"" { return }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    func withFixture(signed: Bool = true, _ body: (Fixture) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<30), into: store, collection: "items")
        try Fixtures.importText(Fixtures.ndjson(0..<3), into: store, collection: "secret")
        var access = AccessPolicy()
        access.privateCollections = ["secret"]
        let key = IndexSigningKey.generate()
        let server = try await TestServer.start(database: dir.file("s.sqlite"), access: access, signingKeys: signed ? [key] : [])
        try await server.stopping { try await body(Fixture(dir: dir, store: store, server: server, key: key)) }
    }

    @Test func theIndexIsSignedCacheableAndRevalidates() async throws {
        try await withFixture { f in
            let response = try await f.get("/v1/index")
            #expect(response.status == 200)
            #expect(response.header("Cache-Control") == "public, max-age=30, stale-while-revalidate=30")
            let index = try SignedIndex.parse(response.body)
            try index.verify(trusting: [f.key.publicKey], now: Int64(Date().timeIntervalSince1970), heldSequence: nil)
            #expect(index.entries.map(\.collection) == ["items"])  // private collections are not published
            let entry = try #require(index.entry(for: "items"))
            #expect(entry.token == (try f.token()))
            #expect(entry.count == 30)
            #expect(entry.digest == (try f.store.read { try $0.recomputedDigest(of: "items") }).fingerprint)
            let etag = try #require(response.header("ETag"))
            #expect(try await f.get("/v1/index", ["If-None-Match": etag]).status == 304)
            // A commit changes the index and its ETag, and raises the sequence.
            try await f.commit(#"{"id":"new"}"#)
            let next = try await f.get("/v1/index", ["If-None-Match": etag])
            #expect(next.status == 200)
            #expect(try SignedIndex.parse(next.body).sequence > index.sequence)
            #expect(try await offPool { try f.server.connect().request("POST", "/v1/index") }.status == 405)
        }
    }

    @Test func withoutAKeyTheIndexIsServedUnsigned() async throws {
        try await withFixture(signed: false) { f in
            let index = try SignedIndex.parse(try await f.get("/v1/index").body)
            #expect(index.signatures.isEmpty)
            #expect(index.entry(for: "items") != nil)
        }
    }

    @Test func deltasAndSnapshotsOfTheHeadAreImmutable() async throws {
        try await withFixture { f in
            let v1 = try f.token()
            try await f.commit(#"{"id":"r0000001","hidden":true}"# + "\n" + #"{"id":"added"}"#)
            let v2 = try f.token()
            for encoding in ["gzip", "identity"] {
                let delta = try await f.get("/v1/collections/items/deltas/\(v1)/\(v2)", ["Accept-Encoding": encoding])
                #expect(delta.status == 200)
                #expect(delta.header("Cache-Control") == "public, max-age=31536000, immutable")
                #expect(delta.header("Vary") == "Accept-Encoding")
                let reader = BodyReader(bytes: try delta.decodedBody())
                let header = try reader.readHeader()
                #expect(header.kind == .delta && header.base == v1 && header.token == v2 && header.count == 2)
            }
            let full = try await f.get("/v1/collections/items/snapshots/\(v2)", ["Accept-Encoding": "gzip"])
            #expect(full.status == 200)
            #expect(full.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(try BodyReader(bytes: try full.decodedBody()).readHeader().count == 30)
            #expect(try await f.get("/v1/collections/items/deltas/\(v2)/\(v2)").status == 200)  // empty, but exact
        }
    }

    /// What cannot be answered exactly is a 404 no cache keeps; errors are never cacheable.
    @Test func supersededUnknownAndBadTokensAreNeverCacheable() async throws {
        try await withFixture { f in
            let v1 = try f.token()
            try await f.commit(#"{"id":"added"}"#)
            let v2 = try f.token()
            let epoch = String(v1.prefix(16))
            let cases: [(String, Int, String)] = [
                ("/v1/collections/items/snapshots/\(v1)", 404, "superseded"),
                ("/v1/collections/items/deltas/\(v1)/\(v1)", 404, "superseded"),
                ("/v1/collections/items/deltas/\(v1)/\(epoch).99", 404, "unknown_target"),
                ("/v1/collections/items/snapshots/\(epoch).99", 404, "unknown_target"),
                ("/v1/collections/items/deltas/\(epoch).50/\(v2)", 404, "unknown_base"),
                ("/v1/collections/items/deltas/garbage/\(v2)", 400, "bad_token"),
                ("/v1/collections/items/snapshots/garbage", 400, "bad_token"),
                ("/v1/collections/secret/snapshots/\(v1)", 404, "not_published"),
                ("/v1/collections/nope/snapshots/\(v1)", 404, "unknown_collection"),
                ("/v1/collections/BAD!/snapshots/\(v1)", 400, "bad_collection_name"),
            ]
            for (path, status, code) in cases {
                let response = try await f.get(path)
                #expect(response.status == status, "\(path)")
                #expect(response.header("Cache-Control") == "no-store", "\(path)")
                let error = try JSONReader(bytes: response.body).readValue()
                #expect(error["error"] == .string(code), "\(path)")
            }
        }
    }

    /// A base below the floor, or of another epoch, is sent to the full body of the target,
    /// permanently (the floor only rises).
    @Test func aBaseBelowTheFloorIsRedirectedToTheFullBody() async throws {
        try await withFixture { f in
            let v1 = try f.token()
            try await f.commit(#"{"id":"r0000002","hidden":true}"#)
            try await f.commit(#"{"id":"more"}"#)
            let v3 = try f.token()
            _ = try f.store.compact("items", throughVersion: .max)
            try await f.server.waitForFloor(try #require(try f.store.head(of: "items")).floor, of: "items")
            for base in [v1, "0123456789abcdef.2"] {
                let response = try await f.get("/v1/collections/items/deltas/\(base)/\(v3)")
                #expect(response.status == 308)
                #expect(response.header("Location") == "/v1/collections/items/snapshots/\(v3)")
                #expect(response.header("Cache-Control") == "public, max-age=31536000, immutable")
            }
        }
    }
}
