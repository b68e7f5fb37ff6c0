import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// What a third party writing a client from docs/PROTOCOL.md alone relies on, pinned on a real
/// server: the body layout (§4), cutting out the signed bytes of the index (§8.1), the order
/// of the cacheable URLs' answers, version-0 and percent-encoded tokens, and a compaction by
/// another process racing polls (§8.3).
@Suite struct ProtocolPrecisionTests {
    typealias Fixture = PublicationEndpointTests.Fixture

    /// `items` (versions 1–3, two records hidden on the way) and `notes`, committed before the
    /// server starts; `private` is private.
    func withFixture(changePollInterval: Duration = .milliseconds(20), _ body: (Fixture) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<5), into: store, collection: "items")
        try Fixtures.importText(#"{"id":"r0000001","hidden":true}"#, into: store, collection: "items")
        try Fixtures.importText(#"{"id":"r0000002","hidden":true}"# + "\n" + #"{"id":"x","v":1}"#, into: store, collection: "items")
        try Fixtures.importText(#"{"id":"p1"}"#, into: store, collection: "private")
        var access = AccessPolicy()
        access.privateCollections = ["private"]
        let key = IndexSigningKey.generate()
        let server = try await TestServer.start(
            database: dir.file("s.sqlite"), access: access, signingKeys: [key], changePollInterval: changePollInterval)
        try await server.stopping { try await body(Fixture(dir: dir, store: store, server: server, key: key)) }
    }

    /// §4: the metadata and `[` on the first line, one record per line, each record line but
    /// the last ending with `,`, and `\n]}\n`; an empty body is `[]}\n`.
    @Test func theBodyLayoutIsWhatTheProtocolSays() async throws {
        try await withFixture { f in
            let full = try await f.get("/v1/collections/items")
            #expect(full.header("Content-Encoding") == nil)
            let text = String(decoding: full.body, as: UTF8.self)
            #expect(text.hasSuffix("\n]}\n"))
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(lines.first?.hasSuffix(#""records":["#) == true)
            let records = lines.dropFirst().dropLast(2)
            #expect(records.count == 4 && lines[lines.count - 2] == "]}" && lines.last == "")
            #expect(records.dropLast().allSatisfy { $0.hasSuffix("},") && !$0.hasPrefix(",") })
            #expect(records.last?.hasSuffix("}") == true && records.last?.hasSuffix(",") == false)
            let head = try f.headToken().description
            let empty = try await f.get("/v1/collections/items/deltas/\(head)/\(head)")
            #expect(String(decoding: empty.body, as: UTF8.self).hasSuffix(#""count":0,"records":[]}"# + "\n"))
        }
    }

    /// §8.1: with collections named `signatures` and `countries`, `,"signatures":` occurs inside
    /// the signed bytes; the documented cut (after `{"index":`, before the *last* occurrence)
    /// gives exactly the canonical index object, and a client pinning the key syncs it.
    @Test func theIndexIsVerifiableWhenACollectionIsNamedSignatures() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(#"{"id":"a","text":",\"signatures\":[]"}"#, into: store, collection: "countries")
        try Fixtures.importText(#"{"id":"s1","note":"},\"signatures\":"}"#, into: store, collection: "signatures")
        let key = IndexSigningKey.generate()
        let server = try await TestServer.start(database: dir.file("s.sqlite"), signingKeys: [key])
        try await server.stopping {
            let document = try await offPool { try server.connect().request("GET", "/v1/index") }.body
            let text = String(decoding: document, as: UTF8.self)
            // The ambiguity is real: the name occurs inside the signed part.
            let first = try #require(text.range(of: #","signatures":"#))
            let last = try #require(text.range(of: #","signatures":"#, options: .backwards))
            #expect(first.lowerBound < last.lowerBound)

            let cut = try #require(SignedIndex.signedBytes(of: document))
            let parsed = try JSONReader(bytes: document).readValue()
            #expect(Array(cut) == CanonicalJSON.bytes(try #require(parsed["index"])))
            let index = try SignedIndex.parse(document)
            #expect(index.signedMessage == SignedIndex.signingDomain + Array(cut))
            try index.verify(trusting: [key.publicKey], now: Int64(Date().timeIntervalSince1970), heldSequence: nil)
            #expect(index.entries.map(\.collection) == ["countries", "signatures"])
            // A cut at the first occurrence would sign something else.
            let naive = Array(document[9..<text.utf8.distance(from: text.utf8.startIndex, to: first.lowerBound)])
            #expect(naive != Array(cut))

            let replica = try DeltaSnapReplica(
                path: dir.file("r.sqlite"), collection: "signatures", url: URL(string: "\(server.baseURL)/v1/collections/signatures")!,
                trustedKeys: [key.publicKey])
            #expect(await replica.sync().name == "full")
            #expect(try await replica.record(id: "s1")?["note"] == .string(#"},"signatures":"#))
        }
    }

    /// §8.3: the rows apply in their documented order.
    @Test func theCacheableURLsAnswerInTheDocumentedOrder() async throws {
        try await withFixture { f in
            let head = try f.headToken()
            let v1 = ServerToken(epoch: head.epoch, version: 1).description
            let v2 = ServerToken(epoch: head.epoch, version: 2).description
            let ahead = ServerToken(epoch: head.epoch, version: head.version + 5).description
            let otherEpoch = ServerToken(epoch: "0123456789abcdef", version: head.version).description
            func answer(_ path: String) async throws -> (Int, String?, String?) {
                let response = try await f.get(path)
                let code: String? = if case .string(let text)? = (try? JSONReader(bytes: response.body).readValue())?["error"] { text } else { nil }
                return (response.status, code, response.header("Retry-After"))
            }
            // A superseded target wins over a base after it.
            #expect(try await answer("/v1/collections/items/deltas/\(ahead)/\(v2)") == (404, "superseded", nil))
            // A target of another epoch is superseded, without Retry-After.
            #expect(try await answer("/v1/collections/items/deltas/\(v1)/\(otherEpoch)") == (404, "superseded", nil))
            #expect(try await answer("/v1/collections/items/snapshots/\(otherEpoch)") == (404, "superseded", nil))
            // A target after the head: not known yet, retry.
            #expect(try await answer("/v1/collections/items/snapshots/\(ahead)") == (404, "unknown_target", "1"))
            // A base after the (current) target.
            #expect(try await answer("/v1/collections/items/deltas/\(ahead)/\(head)") == (404, "unknown_base", nil))
            // Tokens that cannot be ours come before the target checks.
            #expect(try await answer("/v1/collections/items/deltas/garbage/\(v2)") == (400, "bad_token", nil))
            #expect(try await answer("/v1/collections/items/deltas/\(v1)/garbage") == (400, "bad_token", nil))
            // The collection checks come first of all.
            #expect(try await answer("/v1/collections/private/deltas/garbage/\(v2)") == (404, "not_published", nil))
            #expect(try await answer("/v1/collections/nope/deltas/garbage/\(v2)") == (404, "unknown_collection", nil))
        }
    }

    /// Versions start at 1: `<epoch>.0` was never issued. Cacheable URLs answer `bad_token`,
    /// the collection endpoint a full body.
    @Test func aVersionZeroTokenIsOneTheServerNeverIssued() async throws {
        try await withFixture { f in
            let head = try f.headToken()
            let zero = ServerToken(epoch: head.epoch, version: 0).description
            let delta = try await f.get("/v1/collections/items/deltas/\(zero)/\(head)")
            #expect(delta.status == 400 && delta.text.contains("bad_token"))
            #expect(delta.header("Cache-Control") == "no-store")
            #expect(try await f.get("/v1/collections/items/snapshots/\(zero)").status == 400)
            let polled = try await f.get("/v1/collections/items", ["If-None-Match": "\"\(zero)\""])
            #expect(polled.status == 200 && polled.text.contains(#""kind":"full""#))
        }
    }

    /// §8.3: tokens in path segments are percent-decoded; `%2E` is `.`.
    @Test func tokensInPathSegmentsArePercentDecoded() async throws {
        try await withFixture { f in
            let head = try f.headToken()
            let v1 = ServerToken(epoch: head.epoch, version: 1).description
            let plain = try await f.get("/v1/collections/items/deltas/\(v1)/\(head)")
            let encoded = try await f.get("/v1/collections/items/deltas/\(v1.replacingOccurrences(of: ".", with: "%2E"))/\(head.description.replacingOccurrences(of: ".", with: "%2e"))")
            #expect(plain.status == 200 && encoded.status == 200 && plain.body == encoded.body)
            let snapshot = try await f.get("/v1/collections/items/snapshots/\(head.description.replacingOccurrences(of: ".", with: "%2E"))")
            #expect(snapshot.status == 200 && snapshot.text.contains(#""kind":"full""#))
            let broken = try await f.get("/v1/collections/items/snapshots/%ZZ")
            #expect(broken.status == 400 && broken.text.contains("bad_token"))
            #expect("a/b c.~".percentEncodedPathSegment == "a%2Fb%20c.~")
        }
    }

    /// §8.3: a compaction committed by another writer while the server's heads in memory still
    /// have the old floor: a delta URL below the new floor answers `308`, never a full body
    /// marked immutable. First with the change poll slowed down, so the server surely has
    /// not seen the compaction (this pins the read transaction's check); then, as an
    /// invariant, polls racing a compaction at the usual pace (answers may come from the
    /// server's delta cache there).
    @Test func aCompactionByAnotherWriterNeverTurnsADeltaURLIntoAFullBody() async throws {
        try await withFixture(changePollInterval: .seconds(60)) { f in
            let head = try f.headToken()
            let v1 = ServerToken(epoch: head.epoch, version: 1).description
            try #require(try f.store.compact("items", throughVersion: 2) == 1)
            let answer = try await f.get("/v1/collections/items/deltas/\(v1)/\(head)", ["Accept-Encoding": "gzip"])
            #expect(answer.status == 308, "\(answer.status): \(answer.text.prefix(200))")
            #expect(answer.header("Location") == "/v1/collections/items/snapshots/\(head)")
            #expect(answer.header("Cache-Control") == "public, max-age=31536000, immutable")
            // The collection endpoint (no-cache) answers the same base with a full body.
            let polled = try await f.get("/v1/collections/items", ["If-None-Match": "\"\(v1)\""])
            #expect(polled.status == 200 && polled.text.contains(#""kind":"full""#) && polled.header("Cache-Control") == "no-cache")
        }
        try await withFixture { f in
            let head = try f.headToken()
            let bases = (1..<head.version).map { ServerToken(epoch: head.epoch, version: $0).description }
            // Another writer, as `deltasnap compact` would be: its own connection, on a thread
            // of its own (blocking SQLite work), racing the polls.
            let path = f.dir.file("s.sqlite")
            let compaction = Task { try await offPool { try SQLiteDatabase(path: path).compact("items", throughVersion: 2) } }
            var answers: [Int: Int] = [:]
            // Until the server has seen the new floor (its watcher polls every 20 ms), bounded.
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline && answers[308, default: 0] == 0 {
                for base in bases {
                    let response = try await f.get("/v1/collections/items/deltas/\(base)/\(head)", ["Accept-Encoding": "gzip"])
                    answers[response.status, default: 0] += 1
                    if response.status == 200 {
                        #expect(response.text.contains(#""kind":"delta""#), "a delta URL answered a full body")
                    } else {
                        #expect(response.status == 308)
                    }
                }
            }
            #expect(try await compaction.value == 1)
            #expect(answers[308, default: 0] > 0 && answers[200, default: 0] > 0, "\(answers)")
        }
    }

    /// §5.5: write numbers are below 2^63 (PostgreSQL keeps them in a BIGINT): a larger one is
    /// a `400 invalid_batch` on every store, never a server failure.
    @Test func aWriteNumberFrom2To63IsRefused() async throws {
        try await withFixture { f in
            func push(_ seq: String) async throws -> RawHTTPClient.Response {
                let body = #"{"client":"c1","mutations":[{"id":"a","op":"put","seq":\#(seq),"value":{"v":1}}]}"#
                return try await offPool {
                    try f.server.connect().request(
                        "POST", "/v1/collections/items/mutations",
                        headers: ["Authorization": "Bearer \(TestServer.writeToken)", "Content-Type": "application/json"], body: Array(body.utf8))
                }
            }
            let tooLarge = try await push("9223372036854775808")
            #expect(tooLarge.status == 400 && tooLarge.text.contains("invalid_batch") && tooLarge.text.contains("2^63"), "\(tooLarge.text)")
            #expect(try await push("9223372036854775807").status == 200)
        }
    }

    /// §8.1: a compaction raises the published sequence (one sequence, one statement); a
    /// commit to a private collection leaves the index and its ETag as they are.
    @Test func theSequenceMovesWithEveryPublishedChangeOnly() async throws {
        try await withFixture { f in
            let first = try await f.get("/v1/index")
            let etag = try #require(first.header("ETag"))
            try Fixtures.importText(#"{"id":"p2"}"#, into: f.store, collection: "private")
            // Once the server serves the private commit, the index must not have moved.
            try await f.server.waitForToken(try f.store.head(of: "private")?.token, of: "private")
            #expect(try await f.get("/v1/index", ["If-None-Match": etag]).status == 304)
            // Nothing committed between these two reads: only the compaction moves it.
            let sequence = try f.store.read { try $0.publishedState().sequence }
            try f.store.compact("items", throughVersion: 2)
            #expect(try f.store.read { try $0.publishedState().sequence } == sequence + 1)
            var next = first
            for _ in 0..<100 {
                next = try await f.get("/v1/index")
                if next.header("ETag") != etag { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            let index = try SignedIndex.parse(next.body)
            #expect(index.entry(for: "items")?.floor == 2)
            #expect(index.sequence > sequence)
        }
    }
}

extension PublicationEndpointTests.Fixture {
    /// The head of `collection` as the store has it.
    func headToken(_ collection: String = "items") throws -> ServerToken { try #require(try store.head(of: collection)).token }
}
