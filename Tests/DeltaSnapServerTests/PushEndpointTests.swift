import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Crypto
import JWTKit
import Testing

/// `POST /mutations`, `GET …/history` and per-user tokens, against a real server on 127.0.0.1,
/// on each store (SQLite, and a throwaway PostgreSQL cluster).
@Suite struct PushEndpointTests {
    static let secret = "push-endpoint-test-secret"

    func withServer(
        _ backend: TestBackend, access: AccessPolicy = AccessPolicy(jwtSecret: PushEndpointTests.secret),
        _ body: @escaping @Sendable (TestServer, TestDatabase) async throws -> Void
    ) async throws {
        try await TestServer.with(
            backend,
            seed: { store in
                try await store.importText(#"{"id":"n1","title":"a"}"# + "\n" + #"{"id":"n2","title":"b"}"#, collection: "notes")
                try await store.importText(#"{"id":"s1"}"#, collection: "secret")
            },
            start: { try await TestServer.start(database: $0, access: access) }, body)
    }

    func token(_ subject: String = "alice", write: [String] = ["notes"], read: [String] = [], expiresIn: TimeInterval = 600, secret: String = PushEndpointTests.secret) async throws -> String {
        try await AccessClaims(subject: subject, expires: Date().addingTimeInterval(expiresIn), write: write, read: read).signed(secret: secret)
    }

    func push(_ server: TestServer, _ collection: String = "notes", token: String?, _ body: String) async throws -> RawHTTPClient.Response {
        var headers = ["Content-Type": "application/json"]
        if let token { headers["Authorization"] = "Bearer \(token)" }
        let sent = headers
        return try await offPool { try server.connect().request("POST", "/v1/collections/\(collection)/mutations", headers: sent, body: Array(body.utf8)) }
    }

    func error(_ response: RawHTTPClient.Response) -> String? {
        if case .string(let code)? = (try? JSONReader(bytes: response.body).readValue())?["error"] { return code }
        return nil
    }

    static let oneWrite = #"{"client":"c1","mutations":[{"seq":1,"op":"patch","id":"n1","value":{"title":"A"}}]}"#

    @Test(arguments: TestBackend.allCases) func aPushIsAnsweredPerWriteAndServedAsADelta(_ backend: TestBackend) async throws {
        try await withServer(backend) { server, store in
            let before = try #require(try await store.head(of: "notes"))
            let response = try await push(server, token: try await token(), """
                {"client":"c1","mutations":[{"seq":1,"op":"patch","id":"n1","value":{"title":"A"}},{"seq":2,"op":"insert","id":"n2","value":{}}]}
                """)
            #expect(response.status == 200)
            let answer = try #require(PushResponse.parse(response.body))
            #expect(answer.client == "c1" && answer.lastSeq == 2 && answer.committed)
            #expect(answer.results.map(\.status) == [.applied(version: before.version + 1), .refused(.exists("n2"))])
            #expect(response.header("ETag") == "\"\(try #require(answer.token))\"")
            // Every poller sees it through the ordinary delta path.
            let delta = try await offPool { try server.connect().request("GET", "/v1/collections/notes", headers: ["If-None-Match": "\"\(before.token)\""]) }
            #expect(delta.status == 200 && delta.text.contains(#""kind":"delta""#) && delta.text.contains(#""title":"A""#))
            // The retried batch: same answer, nothing new.
            let retried = try await push(server, token: try await token(), """
                {"client":"c1","mutations":[{"seq":1,"op":"patch","id":"n1","value":{"title":"A"}},{"seq":2,"op":"insert","id":"n2","value":{}}]}
                """)
            #expect(PushResponse.parse(retried.body)?.results == answer.results)
            #expect(try await store.head(of: "notes")?.version == before.version + 1)
        }
    }

    @Test(arguments: TestBackend.allCases) func refusedTokensCommitNothing(_ backend: TestBackend) async throws {
        try await withServer(backend) { server, store in
            let before = try await store.head(of: "notes")
            let none = try await push(server, token: nil, Self.oneWrite)
            #expect(none.status == 401 && error(none) == "unauthorized" && none.header("WWW-Authenticate") != nil)
            let expired = try await push(server, token: try await token(expiresIn: -60), Self.oneWrite)
            #expect(expired.status == 401 && error(expired) == "invalid_token")
            #expect(String(decoding: expired.body, as: UTF8.self).contains("expired"))
            let forged = try await push(server, token: try await token(secret: "another-secret-of-some-length"), Self.oneWrite)
            #expect(forged.status == 401 && error(forged) == "invalid_token")
            let garbage = try await push(server, token: "not.a.jwt", Self.oneWrite)
            #expect(garbage.status == 401 && error(garbage) == "invalid_token")
            let otherCollection = try await push(server, token: try await token(write: ["other"]), Self.oneWrite)
            #expect(otherCollection.status == 403 && error(otherCollection) == "forbidden")
            #expect(try await store.head(of: "notes") == before)
            // The owner's write API is for the admin token only: a user's token cannot bypass
            // the ledger and history (or hide every record with ?replace=true).
            let user = try await token(write: ["*"])
            let replace = try await offPool {
                try server.connect().request("POST", "/v1/collections/notes/records?replace=true", headers: ["Authorization": "Bearer \(user)"], body: Array("{\"id\":\"z\"}".utf8))
            }
            #expect(replace.status == 403 && error(replace) == "owner_only")
            #expect(try await store.head(of: "notes") == before)
            // The admin token may write anything.
            let admin = try await push(server, token: TestServer.writeToken, Self.oneWrite)
            #expect(admin.status == 200)
        }
    }

    /// A JWT as another language's library signs it: HS256 over the raw (short) secret, the
    /// `write` claim a space-separated string. No `exp`: refused.
    static func handSigned(_ claims: String, secret: String) -> String {
        func base64URL(_ bytes: some Sequence<UInt8>) -> String {
            Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let input = base64URL(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + base64URL(Array(claims.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Array(input.utf8), using: SymmetricKey(data: Array(secret.utf8)))
        return input + "." + base64URL(mac)
    }

    @Test(arguments: TestBackend.allCases) func tokensSignedElsewhereWithAShortSecretAndStringClaimsAreAccepted(_ backend: TestBackend) async throws {
        try await withServer(backend) { server, _ in
            let exp = Int(Date().timeIntervalSince1970) + 600
            let good = Self.handSigned(#"{"sub":"carol","exp":\#(exp),"write":"other notes"}"#, secret: Self.secret)
            #expect(try await push(server, token: good, Self.oneWrite).status == 200)
            let noExpiry = Self.handSigned(#"{"sub":"carol","write":["notes"]}"#, secret: Self.secret)
            let refused = try await push(server, token: noExpiry, Self.oneWrite)
            #expect(refused.status == 401 && error(refused) == "invalid_token")
        }
    }

    @Test(arguments: TestBackend.allCases) func anEd25519SignedTokenIsAccepted(_ backend: TestBackend) async throws {
        let privateKey = try EdDSA.PrivateKey(curve: .ed25519)
        let pem = privateKey.publicKey.pemRepresentation
        try await withServer(backend, access: AccessPolicy(jwtPublicKeyPEM: pem)) { server, _ in
            let keys = JWTKeyCollection()
            await keys.add(eddsa: privateKey)
            let claims = AccessClaims(subject: "bob", expires: Date().addingTimeInterval(600), write: ["*"], read: [])
            let good = try await push(server, token: try await keys.sign(claims), Self.oneWrite)
            #expect(good.status == 200)
            let hmac = try await push(server, token: try await token(), Self.oneWrite)
            #expect(hmac.status == 401)
        }
    }

    @Test(arguments: TestBackend.allCases) func privateCollectionsNeedAReadClaim(_ backend: TestBackend) async throws {
        try await withServer(backend, access: AccessPolicy(jwtSecret: Self.secret, privateCollections: ["secret"])) { server, _ in
            let anonymous = try await offPool { try server.connect().request("GET", "/v1/collections/secret") }
            #expect(anonymous.status == 401)
            let list = try await offPool { try server.connect().request("GET", "/v1/collections") }
            #expect(!list.text.contains("secret") && list.text.contains("notes"))
            let reader = try await token(write: [], read: ["secret"])
            let allowed = try await offPool { try server.connect().request("GET", "/v1/collections/secret", headers: ["Authorization": "Bearer \(reader)"]) }
            #expect(allowed.status == 200)
            let wrong = try await token(write: ["notes"], read: ["notes"])
            let refused = try await offPool { try server.connect().request("GET", "/v1/collections/secret", headers: ["Authorization": "Bearer \(wrong)"]) }
            #expect(refused.status == 403)
            let publicOne = try await offPool { try server.connect().request("GET", "/v1/collections/notes") }
            #expect(publicOne.status == 200)
        }
    }

    @Test(arguments: TestBackend.allCases) func badBatchesAreFourHundredsWithJSONBodies(_ backend: TestBackend) async throws {
        try await withServer(backend) { server, store in
            let before = try await store.head(of: "notes")
            let jwt = try await token()
            for body in [#"{"client":"c1"}"#, "[]", #"{"client":"c1","mutations":[{"seq":1}, {"seq":1}]}"#, "{"] {
                let response = try await push(server, token: jwt, body)
                #expect(response.status == 400 && error(response) == "invalid_batch", "\(body)")
            }
            let huge = String(repeating: "x", count: 2 * 1024 * 1024)
            let tooLarge = try await push(server, token: jwt, #"{"client":"c1","mutations":[{"seq":1,"op":"put","id":"big","value":{"x":"\#(huge)"}}]}"#)
            #expect(tooLarge.status == 413 && error(tooLarge) == "body_too_large")
            let get = try await offPool { try server.connect().request("GET", "/v1/collections/notes/mutations") }
            #expect(get.status == 405)
            #expect(try await store.head(of: "notes") == before)
        }
    }

    @Test(arguments: TestBackend.allCases) func historyListsReplacedValuesNewestFirst(_ backend: TestBackend) async throws {
        try await withServer(backend) { server, _ in
            _ = try await push(server, token: try await token("alice"), Self.oneWrite)
            _ = try await push(server, token: try await token("bob"), #"{"client":"c9","mutations":[{"seq":1,"op":"delete","id":"n1"}]}"#)
            let response = try await offPool { try server.connect().request("GET", "/v1/collections/notes/records/n1/history") }
            #expect(response.status == 200)
            let value = try JSONReader(bytes: response.body).readValue()
            guard case .array(let entries)? = value["history"] else { Issue.record("no history: \(response.text)"); return }
            #expect(entries.count == 2)
            // The client id only: history is as public as the collection, the user's name is not.
            #expect(entries.first?["replacedBy"] == .string("c9"))
            #expect(entries.first?["value"] == (try JSONReader(bytes: Array(#"{"id":"n1","title":"A"}"#.utf8)).readValue()))
            #expect(entries.last?["replacedBy"] == .string("c1"))
            let limited = try await offPool { try server.connect().request("GET", "/v1/collections/notes/records/n1/history?limit=1") }
            #expect(limited.text.components(separatedBy: "replacedAt").count == 2)
            let badLimit = try await offPool { try server.connect().request("GET", "/v1/collections/notes/records/n1/history?limit=0") }
            #expect(badLimit.status == 400)
            let unknown = try await offPool { try server.connect().request("GET", "/v1/collections/nope/records/n1/history") }
            #expect(unknown.status == 404)
            let none = try await offPool { try server.connect().request("GET", "/v1/collections/notes/records/n2/history") }
            #expect(none.status == 200 && none.text.contains(#""history":[]"#))
        }
    }
}
