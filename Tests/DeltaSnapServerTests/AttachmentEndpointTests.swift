import Crypto
import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Attachments over HTTP, against a real server on 127.0.0.1 on each store: uploads (whole
/// and resumable, draft-ietf-httpbis-resumable-upload), downloads with ranges, the
/// `missing_attachment` rule on every write path, and who may read or go on with what.
@Suite struct AttachmentEndpointTests {
    static let secret = "attachment-endpoint-test-secret"

    /// `count` bytes of a pattern that differs with `seed`.
    static func blob(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) &+ seed }
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    struct Fixture: Sendable {
        let server: TestServer
        let store: TestDatabase

        func request(
            _ method: String, _ path: String, as subject: String? = "admin", headers: [String: String] = [:], body: [UInt8] = []
        ) async throws -> RawHTTPClient.Response {
            var headers = headers
            if let subject {
                headers["Authorization"] = "Bearer \(subject == "admin" ? TestServer.writeToken : try await AttachmentEndpointTests.token(subject))"
            }
            let sent = headers
            return try await offPool { try server.connect().request(method, path, headers: sent, body: body) }
        }

        /// Uploads `bytes` whole to `base` and returns the reference the server answers.
        func upload(_ bytes: [UInt8], to base: String, as subject: String = "admin", type: String = "image/png") async throws -> String {
            let response = try await request(
                "PUT", "\(base)/attachments/\(AttachmentEndpointTests.sha256(bytes))", as: subject, headers: ["Content-Type": type], body: bytes)
            #expect(response.status == 201, "\(response.text)")
            return response.text.trimmingCharacters(in: .newlines)
        }
    }

    static func token(_ subject: String) async throws -> String {
        try await AccessClaims(subject: subject, expires: Date().addingTimeInterval(600), write: [], read: []).signed(secret: secret)
    }

    static func error(_ response: RawHTTPClient.Response) -> String? {
        if case .string(let code)? = (try? JSONReader(bytes: response.body).readValue())?["error"] { return code }
        return nil
    }

    func withServer(
        _ backend: TestBackend, maximumAttachmentBytes: UInt64? = nil, _ body: @escaping @Sendable (Fixture) async throws -> Void
    ) async throws {
        let access = AccessPolicy(jwtSecret: Self.secret, rules: try AccessRules(yaml: """
            collections:
              notes:    { read: public, write: admin }
              attempts: { partitioned: true, read: owner, write: owner }
            """))
        try await TestServer.with(
            backend,
            seed: { store in
                try await store.importText(#"{"id":"n0","title":"no photo"}"#, collection: "notes")
                try await store.importText(#"{"id":"a0","score":1}"#, collection: "attempts/alice")
                try await store.importText(#"{"id":"b0","score":2}"#, collection: "attempts/bob")
            },
            start: { try await TestServer.start(database: $0, access: access, maximumAttachmentBytes: maximumAttachmentBytes) }
        ) { server, store in try await body(Fixture(server: server, store: store)) }
    }

    @Test(arguments: TestBackend.allCases) func aBlobUploadedWholeIsServedWithRangesToItsReaders(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(300_000)
            let hash = Self.sha256(bytes)
            let reference = try await fixture.upload(bytes, to: "/v1/collections/notes")
            #expect(reference == #"{"$attachment":"\#(hash)","size":300000,"type":"image/png"}"#)
            let url = "/v1/collections/notes/attachments/\(hash)"
            // Held, but no record refers to it yet: the 404 of a hash never stored.
            let early = try await fixture.request("GET", url, as: nil)
            #expect(early.status == 404 && Self.error(early) == "unknown_attachment")
            let write = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(reference)}"#.utf8))
            #expect(write.status == 200, "\(write.text)")

            let whole = try await fixture.request("GET", url, as: nil)
            #expect(whole.status == 200 && whole.body == bytes)
            #expect(whole.header("ETag") == "\"\(hash)\"" && whole.header("Content-Type") == "image/png" && whole.header("Accept-Ranges") == "bytes")
            #expect(whole.header("Cache-Control") == "public, max-age=31536000, immutable")
            let part = try await fixture.request("GET", url, as: nil, headers: ["Range": "bytes=1000-1999"])
            #expect(part.status == 206 && part.header("Content-Range") == "bytes 1000-1999/300000" && part.body == Array(bytes[1000..<2000]))
            let suffix = try await fixture.request("GET", url, as: nil, headers: ["Range": "bytes=-10"])
            #expect(suffix.status == 206 && suffix.body == Array(bytes.suffix(10)))
            let open = try await fixture.request("GET", url, as: nil, headers: ["Range": "bytes=299990-"])
            #expect(open.status == 206 && open.body == Array(bytes.suffix(10)))
            let past = try await fixture.request("GET", url, as: nil, headers: ["Range": "bytes=300000-"])
            #expect(past.status == 416 && past.header("Content-Range") == "bytes */300000")
            let stale = try await fixture.request("GET", url, as: nil, headers: ["Range": "bytes=0-9", "If-Range": "\"another\""])
            #expect(stale.status == 200 && stale.body.count == 300_000)
            let fresh = try await fixture.request("GET", url, as: nil, headers: ["Range": "bytes=0-9", "If-Range": "\"\(hash)\""])
            #expect(fresh.status == 206 && fresh.body == Array(bytes.prefix(10)))
            let revalidated = try await fixture.request("GET", url, as: nil, headers: ["If-None-Match": "\"\(hash)\""])
            #expect(revalidated.status == 304 && revalidated.body.isEmpty)
            let head = try await fixture.request("HEAD", url, as: nil)
            #expect(head.status == 200 && head.header("Content-Length") == "300000" && head.body.isEmpty)
            let unknown = try await fixture.request("GET", "/v1/collections/notes/attachments/\(String(repeating: "e", count: 64))", as: nil)
            #expect(unknown.status == 404 && Self.error(unknown) == "unknown_attachment")

            let metrics = try await fixture.request("GET", "/metrics")
            #expect(metrics.text.contains("deltasnap_attachment_bytes_received_total 300000"), "\(metrics.text)")
            #expect(metrics.text.contains("deltasnap_attachments_stored_total 1"))
            #expect(metrics.text.contains("deltasnap_attachment_bytes_sent_total"))
        }
    }

    @Test(arguments: TestBackend.allCases) func aWriteReferringToABlobTheStoreDoesNotHoldIsRefusedAlone(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(5_000)
            let held = try await fixture.upload(bytes, to: "/v1/collections/notes")
            let missing = #"{"$attachment":"\#(String(repeating: "a", count: 64))","size":10,"type":"image/png"}"#
            let before = try await fixture.store.head(of: "notes")

            let put = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(missing)}"#.utf8))
            #expect(put.status == 409 && Self.error(put) == "missing_attachment", "\(put.text)")
            let wrongSize = held.replacingOccurrences(of: "\"size\":5000", with: "\"size\":4999")
            let resized = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(wrongSize)}"#.utf8))
            #expect(resized.status == 409 && Self.error(resized) == "missing_attachment")
            let malformed = try await fixture.request(
                "PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":{"$attachment":"nope","size":1,"type":"image/png"}}"#.utf8))
            #expect(malformed.status == 400 && Self.error(malformed) == "invalid_attachment" && malformed.text.contains("photo"))
            let batch = #"{"id":"n1","photos":[\#(held)]}"# + "\n" + #"{"id":"n2","photo":\#(missing)}"#
            let posted = try await fixture.request("POST", "/v1/collections/notes/records", body: Array(batch.utf8))
            #expect(posted.status == 409 && Self.error(posted) == "missing_attachment" && posted.text.contains("line 2"), "\(posted.text)")
            #expect(try await fixture.store.head(of: "notes") == before, "a refused write committed something")

            // A push: the write that refers to a missing blob is refused, its neighbours land.
            let push = #"""
                {"client":"c1","mutations":[{"seq":1,"op":"put","id":"n3","value":{"photo":\#(missing)}},{"seq":2,"op":"put","id":"n4","value":{"photo":\#(held)}}]}
                """#
            let pushed = try await fixture.request("POST", "/v1/collections/notes/mutations", headers: ["Content-Type": "application/json"], body: Array(push.utf8))
            let answer = try #require(PushResponse.parse(pushed.body), "\(pushed.text)")
            #expect(answer.results.count == 2)
            if case .refused(let refusal) = answer.results[0].status { #expect(refusal.code == "missing_attachment") } else { Issue.record("\(answer.results[0])") }
            if case .applied = answer.results[1].status {} else { Issue.record("\(answer.results[1])") }
            let exported = try await fixture.store.export("notes")
            #expect(exported.contains(#""id":"n4""#) && !exported.contains(#""id":"n3""#))
        }
    }

    @Test(arguments: TestBackend.allCases) func anUploadWhoseBytesAreNotWhatItsHashSaysKeepsNothing(_ backend: TestBackend) async throws {
        try await withServer(backend, maximumAttachmentBytes: 100_000) { fixture in
            var bytes = Self.blob(50_000)
            let hash = Self.sha256(bytes)
            bytes[20_000] ^= 1
            let flipped = try await fixture.request("PUT", "/v1/collections/notes/attachments/\(hash)", body: bytes)
            #expect(flipped.status == 400 && Self.error(flipped) == "attachment_mismatch")
            let reference = #"{"$attachment":"\#(hash)","size":50000,"type":"application/octet-stream"}"#
            let write = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"file":\#(reference)}"#.utf8))
            #expect(write.status == 409 && Self.error(write) == "missing_attachment", "the refused bytes were kept")

            let large = Self.blob(100_001)
            let tooLarge = try await fixture.request("PUT", "/v1/collections/notes/attachments/\(Self.sha256(large))", body: large)
            #expect(tooLarge.status == 413 && Self.error(tooLarge) == "attachment_too_large")
            #expect(tooLarge.header("Upload-Limit")?.hasPrefix("max-size=100000") == true)
            let options = try await fixture.request("OPTIONS", "/v1/collections/notes/attachments/\(hash)", as: nil)
            #expect(options.status == 204 && options.header("Upload-Limit")?.contains("max-size=100000") == true)
            let badHash = try await fixture.request("PUT", "/v1/collections/notes/attachments/XYZ", body: [1])
            #expect(badHash.status == 400 && Self.error(badHash) == "invalid_attachment")
            let anonymous = try await fixture.request("PUT", "/v1/collections/notes/attachments/\(hash)", as: nil, body: [1])
            #expect(anonymous.status == 401)
        }
    }

    @Test(arguments: TestBackend.allCases) func aResumableUploadGoesOnFromTheServersOffset(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(300_000, seed: 7)
            let hash = Self.sha256(bytes)
            let created = try await fixture.request(
                "POST", "/v1/collections/notes/attachments/\(hash)",
                headers: ["Upload-Draft-Interop-Version": "8", "Upload-Complete": "?0", "Upload-Length": "300000", "Content-Type": "image/jpeg"],
                body: Array(bytes[0..<100_000]))
            #expect(created.status == 201, "\(created.text)")
            let location = try #require(created.header("Location"))
            #expect(location.hasPrefix("/v1/uploads/") && created.header("Upload-Offset") == "100000" && created.header("Upload-Complete") == "?0")
            let announced = try #require(created.informational.first, "no 104 before the answer")
            #expect(announced.status == 104 && announced.header("Location") == location && announced.header("Upload-Draft-Interop-Version") == "8")
            // The token reaches the route inside the server: a client cannot name one for it.
            let hijack = try await fixture.request(
                "POST", "/v1/collections/notes/attachments/\(hash)",
                headers: ["Upload-Draft-Interop-Version": "8", "Upload-Complete": "?0", "Upload-Length": "300000",
                          "DeltaSnap-Announced-Upload": String(location.dropFirst("/v1/uploads/".count))],
                body: Array(bytes[0..<10]))
            #expect(hijack.status == 201 && hijack.header("Location") != location && hijack.informational.first?.header("Location") == hijack.header("Location"))

            let progress = try await fixture.request("HEAD", location, headers: ["Upload-Draft-Interop-Version": "8"])
            #expect(progress.status == 204 && progress.header("Upload-Offset") == "100000" && progress.header("Upload-Length") == "300000")
            #expect(progress.header("Cache-Control") == "no-store" && progress.header("Upload-Complete") == "?0")
            let headers = ["Upload-Draft-Interop-Version": "8", "Content-Type": "application/partial-upload"]
            let wrong = try await fixture.request(
                "PATCH", location, headers: headers.merging(["Upload-Offset": "50", "Upload-Complete": "?0"]) { $1 }, body: Array(bytes[50..<100]))
            #expect(wrong.status == 409 && wrong.header("Upload-Offset") == "100000")
            let problem = try JSONReader(bytes: wrong.body).readValue()
            #expect(problem["type"] == .string("https://iana.org/assignments/http-problem-types#mismatching-upload-offset"))
            #expect(problem["expected-offset"] == .number("100000") && problem["provided-offset"] == .number("50"))
            let middle = try await fixture.request(
                "PATCH", location, headers: headers.merging(["Upload-Offset": "100000", "Upload-Complete": "?0"]) { $1 }, body: Array(bytes[100_000..<200_000]))
            #expect(middle.status == 204 && middle.header("Upload-Offset") == "200000")
            let last = try await fixture.request(
                "PATCH", location, headers: headers.merging(["Upload-Offset": "200000", "Upload-Complete": "?1"]) { $1 }, body: Array(bytes[200_000...]))
            #expect(last.status == 200 && last.header("Upload-Complete") == "?1", "\(last.text)")
            #expect(last.text.contains(#""$attachment":"\#(hash)""#) && last.text.contains(#""type":"image/jpeg""#))
            #expect(try await fixture.request("HEAD", location).status == 404, "a finished upload is gone")

            let write = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(last.text.trimmingCharacters(in: .newlines))}"#.utf8))
            #expect(write.status == 200)
            #expect(try await fixture.request("GET", "/v1/collections/notes/attachments/\(hash)", as: nil).body == bytes)

            // Interop version 3 (iOS 17): Upload-Incomplete, the opposite sense.
            let small = Self.blob(1_000, seed: 9)
            let old = try await fixture.request(
                "PUT", "/v1/collections/notes/attachments/\(Self.sha256(small))",
                headers: ["Upload-Draft-Interop-Version": "3", "Upload-Incomplete": "?1", "Upload-Length": "1000"], body: Array(small[0..<400]))
            #expect(old.status == 201 && old.header("Upload-Incomplete") == "?1" && old.informational.first?.status == 104)
            let oldLocation = try #require(old.header("Location"))
            let finished = try await fixture.request(
                "PATCH", oldLocation, headers: ["Upload-Draft-Interop-Version": "3", "Upload-Offset": "400", "Upload-Incomplete": "?0"], body: Array(small[400...]))
            #expect(finished.status == 200 && finished.header("Upload-Incomplete") == "?0", "\(finished.text)")

            // A last part whose bytes do not hash to the name: refused, the upload gone.
            let other = Self.blob(2_000, seed: 3)
            let begun = try await fixture.request(
                "POST", "/v1/collections/notes/attachments/\(Self.sha256(other))",
                headers: ["Upload-Draft-Interop-Version": "8", "Upload-Complete": "?0", "Upload-Length": "2000"], body: Array(other[0..<1_000]))
            let begunLocation = try #require(begun.header("Location"))
            var corrupt = Array(other[1_000...])
            corrupt[10] ^= 0xFF
            let refused = try await fixture.request(
                "PATCH", begunLocation, headers: headers.merging(["Upload-Offset": "1000", "Upload-Complete": "?1"]) { $1 }, body: corrupt)
            #expect(refused.status == 400 && Self.error(refused) == "attachment_mismatch")
            #expect(try await fixture.request("HEAD", begunLocation).status == 404)
        }
    }

    @Test(arguments: TestBackend.allCases) func aCutUploadResumesAfterTheBytesThatArrived(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(3_000_000, seed: 5)
            let hash = Self.sha256(bytes)
            let sent = 1_200_000
            // The whole upload in one request, cut after the 104 and 1.2 MB of content.
            let location: String = try await offPool {
                let connection = try fixture.server.connect()
                let head = """
                    PUT /v1/collections/notes/attachments/\(hash) HTTP/1.1\r
                    Host: 127.0.0.1\r
                    Authorization: Bearer \(TestServer.writeToken)\r
                    Upload-Draft-Interop-Version: 9\r
                    Upload-Complete: ?1\r
                    Content-Length: 3000000\r
                    \r

                    """
                try connection.sendBytes(Array(head.utf8))
                let announced = try connection.nextHead()
                guard announced.status == 104, let location = announced.header("Location") else {
                    throw RawHTTPClient.Failure(description: "no 104: \(announced.status)")
                }
                try connection.sendBytes(Array(bytes[0..<sent]))
                return location
            }
            // The server notices the cut and keeps what arrived.
            var offset: String?
            for _ in 0..<100 {
                offset = try await fixture.request("HEAD", location).header("Upload-Offset")
                if offset == String(sent) { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(offset == String(sent))
            let rest = try await fixture.request(
                "PATCH", location, headers: ["Upload-Draft-Interop-Version": "9", "Upload-Offset": String(sent), "Upload-Complete": "?1",
                                             "Content-Type": "application/partial-upload"],
                body: Array(bytes[sent...]))
            #expect(rest.status == 200, "\(rest.text)")
            #expect(try await fixture.store.store.attachmentSize(hash) == 3_000_000)
        }
    }

    @Test(arguments: TestBackend.allCases) func anotherUsersAttachmentIsTheSame404AsNone(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(10_000, seed: 11)
            let hash = Self.sha256(bytes)
            let alice = "/v1/collections/attempts/partitions/alice"
            let reference = try await fixture.upload(bytes, to: alice, as: "alice")
            let push = #"{"client":"phone","mutations":[{"seq":1,"op":"put","id":"a1","value":{"photo":\#(reference)}}]}"#
            let pushed = try await fixture.request("POST", "\(alice)/mutations", as: "alice", headers: ["Content-Type": "application/json"], body: Array(push.utf8))
            #expect(pushed.status == 200 && pushed.text.contains("applied"), "\(pushed.text)")
            let own = try await fixture.request("GET", "\(alice)/attachments/\(hash)", as: "alice")
            #expect(own.status == 200 && own.body == bytes && own.header("Cache-Control") == "private, no-store")

            let nothing = String(repeating: "d", count: 64)
            for (method, headers) in [("GET", [String: String]()), ("HEAD", [:]), ("GET", ["Range": "bytes=0-9"])] {
                for base in ["/v1/collections/attempts/partitions/bob", alice] {
                    let theirs = try await fixture.request(method, "\(base)/attachments/\(hash)", as: "bob", headers: headers)
                    let none = try await fixture.request(method, "\(base)/attachments/\(nothing)", as: "bob", headers: headers)
                    #expect(theirs.status == 404 && theirs.status == none.status && Self.error(theirs) == Self.error(none), "\(method) \(base)")
                }
            }
            // Bob's own upload of the same bytes transfers and checks them all.
            var altered = bytes
            altered[9_999] ^= 1
            let refused = try await fixture.request("PUT", "/v1/collections/attempts/partitions/bob/attachments/\(hash)", as: "bob", body: altered)
            #expect(refused.status == 400 && Self.error(refused) == "attachment_mismatch", "a held blob was taken on trust")
            _ = try await fixture.upload(bytes, to: "/v1/collections/attempts/partitions/bob", as: "bob")

            // Alice's upload in progress: Bob cannot see or touch it.
            let begun = try await fixture.request(
                "POST", "\(alice)/attachments/\(Self.sha256(Self.blob(500)))", as: "alice",
                headers: ["Upload-Draft-Interop-Version": "8", "Upload-Complete": "?0", "Upload-Length": "500"], body: Array(Self.blob(500)[0..<100]))
            let location = try #require(begun.header("Location"))
            let absent = "/v1/uploads/\(String(repeating: "0", count: 32))"
            for method in ["HEAD", "PATCH", "DELETE"] {
                let headers = ["Upload-Offset": "100", "Upload-Complete": "?0"]
                let theirs = try await fixture.request(method, location, as: "bob", headers: headers, body: method == "PATCH" ? [1] : [])
                let none = try await fixture.request(method, absent, as: "bob", headers: headers, body: method == "PATCH" ? [1] : [])
                #expect(theirs.status == 404 && none.status == 404 && Self.error(theirs) == Self.error(none), "\(method)")
            }
            #expect(try await fixture.request("HEAD", location, as: "alice").header("Upload-Offset") == "100")
            #expect(try await fixture.request("DELETE", location, as: "alice").status == 204)
            #expect(try await fixture.request("HEAD", location, as: "alice").status == 404)
        }
    }

    /// Behind nginx's `proxy_cache`: a thousand downloads of one public blob cost the origin
    /// one request, and `Range` requests are answered from the cached copy.
    @Test func aPublicBlobBehindASharedCacheCostsTheOriginOneRequest() async throws {
        try await withServer(.sqlite) { fixture in
            let bytes = Self.blob(200_000, seed: 21)
            let hash = Self.sha256(bytes)
            let reference = try await fixture.upload(bytes, to: "/v1/collections/notes")
            let write = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(reference)}"#.utf8))
            #expect(write.status == 200)
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let cache = try await NginxCache.start(originPort: fixture.server.port, in: dir.path)
            defer { cache.stop() }
            let path = "/v1/collections/notes/attachments/\(hash)"
            let (whole, part) = try await offPool { () -> (Int, RawHTTPClient.Response) in
                var whole = 0
                for _ in 0..<1_000 {
                    let response = try RawHTTPClient(port: cache.port).request("GET", path)
                    if response.status == 200 && response.body == bytes { whole += 1 }
                }
                return (whole, try RawHTTPClient(port: cache.port).request("GET", path, headers: ["Range": "bytes=100-199"]))
            }
            #expect(whole == 1_000)
            #expect(part.status == 206 && part.body == Array(bytes[100..<200]) && part.header("Content-Range") == "bytes 100-199/200000")
            let fetched = cache.accessLog().filter { $0.uri == path && $0.cache != "HIT" }
            #expect(fetched.count == 1, "the origin was asked \(fetched.count) times: \(fetched.prefix(5))")
        }
    }

    /// A small public blob, once served, is answered before the router — from raw bytes, or
    /// after NIO's decoder for a `HEAD` or a `Range` — with exactly the router's status,
    /// headers and body, and counted as the router counts it.
    @Test(arguments: TestBackend.allCases) func aServedSmallBlobIsAnsweredBeforeTheRouterAsTheRouterAnswers(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(30_000, seed: 31)
            let hash = Self.sha256(bytes)
            let reference = try await fixture.upload(bytes, to: "/v1/collections/notes")
            #expect(try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(reference)}"#.utf8)).status == 200)
            let url = "/v1/collections/notes/attachments/\(hash)"
            func fastAnswers() async throws -> Int {
                let text = try await fixture.request("GET", "/metrics").text
                return text.split(separator: "\n").first { $0.hasPrefix("deltasnap_fast_path_responses_total ") }.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
            }
            func comparable(_ response: RawHTTPClient.Response) -> [String] {
                response.headers.filter { !["date", "x-request-id"].contains($0.0.lowercased()) }.map { "\($0.0): \($0.1)" }
            }
            let routed = try await fixture.request("GET", url, as: nil)
            let before = try await fastAnswers()
            for (method, headers) in [("GET", [String: String]()), ("HEAD", [:]), ("GET", ["Range": "bytes=10-19"]), ("GET", ["If-None-Match": "\"\(hash)\""])] {
                let fast = try await fixture.request(method, url, as: nil, headers: headers)
                switch (method, headers.keys.first) {
                case ("GET", nil):
                    #expect(fast.status == 200 && fast.body == bytes && comparable(fast) == comparable(routed), "\(comparable(fast)) vs \(comparable(routed))")
                case ("HEAD", _):
                    #expect(fast.status == 200 && fast.body.isEmpty && comparable(fast) == comparable(routed))
                case (_, "Range"):
                    #expect(fast.status == 206 && fast.body == Array(bytes[10..<20]))
                default:
                    #expect(fast.status == 304)
                }
            }
            #expect(try await fastAnswers() == before + 4, "not answered before the router")
            let metrics = try await fixture.request("GET", "/metrics").text
            #expect(metrics.contains(#"deltasnap_http_responses_total{route="/v1/collections/{name}/attachments/{hash}",status="200"}"#), "\(metrics)")
        }
    }

    /// Small blobs' files are kept open and lent to every download (nginx's
    /// `open_file_cache`): a descriptor NIO closed after one `sendfile`, or one reused for
    /// another file, would cut or mix the downloads that follow. The sizes take both ways a
    /// kept file is sent: read into the head's buffer (up to 32 KiB) and by `sendfile`.
    @Test func keptDescriptorsServeEveryLaterDownloadWhole() async throws {
        try await withServer(.sqlite) { fixture in
            var blobs: [(url: String, bytes: [UInt8])] = []
            for (seed, size) in zip(UInt8(40)..<43, [20_483, 32_768, 100_001]) {
                let bytes = Self.blob(size, seed: seed)
                let reference = try await fixture.upload(bytes, to: "/v1/collections/notes")
                #expect(try await fixture.request("PUT", "/v1/collections/notes/records/n\(seed)", body: Array(#"{"photo":\#(reference)}"#.utf8)).status == 200)
                blobs.append(("/v1/collections/notes/attachments/\(Self.sha256(bytes))", bytes))
            }
            func fastAnswers() async throws -> Int {
                let text = try await fixture.request("GET", "/metrics").text
                return text.split(separator: "\n").first { $0.hasPrefix("deltasnap_fast_path_responses_total ") }.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
            }
            for blob in blobs { #expect(try await fixture.request("GET", blob.url, as: nil).body == blob.bytes) }  // remembered by the router
            let before = try await fastAnswers()
            for round in 0..<30 {
                let blob = blobs[round % blobs.count]
                let response = try await fixture.request("GET", blob.url, as: nil)
                #expect(response.status == 200 && response.body == blob.bytes, "download \(round): \(response.status), \(response.body.count) bytes")
            }
            let together = try await withThrowingTaskGroup(of: Bool.self) { group in
                for round in 0..<30 {
                    let blob = blobs[round % blobs.count]
                    group.addTask { try await fixture.request("GET", blob.url, as: nil).body == blob.bytes }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(together == 30)
            #expect(try await fastAnswers() == before + 60, "not all answered before the router")
        }
    }

    /// A large blob's file gone under the reference the server remembers (the SQLite store
    /// keeps blobs as files; garbage collection removes them): the fast path, which sends it by
    /// `sendfile`, cannot open it and leaves the request to the router — counting nothing.
    @Test func aFileGoneUnderTheFastPathIsLeftToTheRouterUncounted() async throws {
        try await withServer(.sqlite) { fixture in
            let bytes = Self.blob(300_000, seed: 7)
            let hash = Self.sha256(bytes)
            let reference = try await fixture.upload(bytes, to: "/v1/collections/notes")
            #expect(try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(reference)}"#.utf8)).status == 200)
            let url = "/v1/collections/notes/attachments/\(hash)"
            func counter(_ name: String) async throws -> Int {
                let text = try await fixture.request("GET", "/metrics").text
                return text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
            }
            #expect(try await fixture.request("GET", url, as: nil).body == bytes)  // the router's, which remembers the reference
            let fast = try await counter("deltasnap_fast_path_responses_total")
            #expect(try await fixture.request("GET", url, as: nil).body == bytes)
            #expect(try await counter("deltasnap_fast_path_responses_total") == fast + 1)
            let sent = try await counter("deltasnap_attachment_bytes_sent_total")
            try FileManager.default.removeItem(atPath: "\(fixture.store.url).attachments/\(hash.prefix(2))/\(hash)")
            let gone = try await fixture.request("GET", url, as: nil)
            #expect(gone.status != 200 && gone.status < 500, "\(gone.status) \(gone.text)")
            #expect(try await counter("deltasnap_fast_path_responses_total") == fast + 1)
            #expect(try await counter("deltasnap_attachment_bytes_sent_total") == sent)
        }
    }
}
