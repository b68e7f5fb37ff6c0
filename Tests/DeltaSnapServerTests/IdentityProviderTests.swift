import Crypto
@testable import DeltaSnapServer
import DeltaSnapTestSupport
import Foundation
import Testing

/// `serve --jwks-url`: tokens of an identity provider, minted by an independent library
/// (PyJWT and `cryptography`, in Tests/Fixtures/jwks_provider.py) and verified against the key
/// set it publishes on 127.0.0.1 — rotated, withdrawn, unreachable — and the attacks a key
/// set invites (forged kids, `alg: none`, HS256 signed with the RSA public key).
@Suite struct IdentityProviderTests {
    static let oneWrite = #"{"client":"c1","mutations":[{"seq":1,"op":"patch","id":"n1","value":{"title":"A"}}]}"#

    /// A server whose JWTs come from `provider`'s key set (with `configure` applied), for `body`.
    func withServer(
        _ provider: PythonIdentityProvider, policy: KeySetRefreshPolicy = KeySetRefreshPolicy(),
        issuers: [String] = [], audiences: [String] = [], claims mapping: ClaimMapping = ClaimMapping(),
        _ body: @escaping @Sendable (TestServer, JWKSKeySource) async throws -> Void
    ) async throws {
        let keySet = try await JWKSKeySource(url: provider.jwksURL, policy: policy)
        var access = AccessPolicy()
        access.keySets = [keySet]
        access.issuers = issuers
        access.audiences = audiences
        access.claims = mapping
        try await TestServer.with(
            .sqlite, seed: { try await $0.importText(#"{"id":"n1","title":"a"}"#, collection: "notes") },
            start: { try await TestServer.start(database: $0, access: access) }
        ) { server, _ in try await body(server, keySet) }
    }

    func push(_ server: TestServer, token: String) async throws -> Int {
        let headers = ["Content-Type": "application/json", "Authorization": "Bearer \(token)"]
        return try await offPool { try server.connect().request("POST", "/v1/collections/notes/mutations", headers: headers, body: Array(Self.oneWrite.utf8)) }.status
    }

    func claims(_ subject: String = "alice", expiresIn: TimeInterval = 600, extra: [String: Any] = [:]) -> [String: Any] {
        var claims: [String: Any] = ["sub": subject, "exp": Int(Date().timeIntervalSince1970 + expiresIn), "write": ["notes"]]
        for (name, value) in extra { claims[name] = value }
        return claims
    }

    func expectStatus(_ expected: Int, _ got: Int, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(got == expected, sourceLocation: sourceLocation)
    }

    func refusals(_ server: TestServer, _ reason: String) -> Int {
        let line = server.service.metrics.render().split(separator: "\n").first { $0.hasPrefix("deltasnap_token_refusals_total{reason=\"\(reason)\"}") }
        return line.flatMap { $0.split(separator: " ").last.flatMap { Int($0) } } ?? 0
    }

    @Test func tokensOfEachAlgorithmVerifyByTheirKid() async throws {
        let provider = try await PythonIdentityProvider.start()
        defer { provider.stop() }
        for (kid, type) in [("rsa-1", "rsa"), ("pss-1", "pss"), ("ec-1", "ec"), ("ed-1", "ed")] {
            try await provider.get("/key?kid=\(kid)&type=\(type)")
        }
        try await provider.get("/publish?kids=rsa-1,pss-1,ec-1,ed-1")
        try await withServer(provider) { server, keySet in
            #expect(keySet.keyIdentifiers == ["rsa-1", "pss-1", "ec-1", "ed-1"])
            for kid in ["rsa-1", "pss-1", "ec-1", "ed-1"] {
                let token = try await provider.mint(kid: kid, claims: claims("user-\(kid)"))
                #expect(try await push(server, token: token) == 200, "\(kid)")
            }
        }
    }

    @Test func forgedKidsUnsignedAndAlgorithmConfusedTokensAreRefused() async throws {
        let provider = try await PythonIdentityProvider.start()
        defer { provider.stop() }
        try await provider.get("/key?kid=rsa-1&type=rsa")
        try await provider.get("/publish?kids=rsa-1")
        try await withServer(provider) { server, _ in
            let fetchesBefore = try await provider.fetches()
            // Twenty unknown kids: at most one fetch of the set (then one per 30 s), not twenty.
            for index in 0..<20 {
                #expect(try await push(server, token: try await provider.mint(kid: "forged-\(index)", claims: claims(), mode: "forged")) == 401)
            }
            #expect(try await provider.fetches() - fetchesBefore <= 1)
            #expect(refusals(server, "unknown_kid") == 20)
            // A known kid, another key's signature.
            #expect(try await push(server, token: try await provider.mint(kid: "rsa-1", claims: claims(), mode: "forged")) == 401)
            #expect(refusals(server, "bad_signature") == 1)
            // The key is RS256: a token that says PS256 (validly signed as PS256 with the same key) is refused.
            #expect(try await push(server, token: try await provider.mint(kid: "rsa-1", claims: claims(), alg: "PS256")) == 401)
            #expect(try await push(server, token: try await provider.mint(kid: "rsa-1", claims: claims(), mode: "none")) == 401)
            #expect(try await push(server, token: try await provider.mint(kid: "rsa-1", claims: claims(), mode: "hs256-public")) == 401)
            #expect(refusals(server, "wrong_algorithm") == 3)
            #expect(try await push(server, token: try await provider.mint(kid: "rsa-1", claims: claims())) == 200)
        }
    }

    @Test func issuerAudienceAndTimesAreChecked() async throws {
        let provider = try await PythonIdentityProvider.start()
        defer { provider.stop() }
        try await provider.get("/key?kid=ec-1&type=ec")
        try await provider.get("/publish?kids=ec-1")
        let issuer = "https://issuer.test/"
        try await withServer(provider, issuers: [issuer], audiences: ["deltasnap-api"]) { server, _ in
            let status = { @Sendable (claims: [String: Any]) async throws -> Int in
                try await push(server, token: try await provider.mint(kid: "ec-1", claims: claims))
            }
            let now = Int(Date().timeIntervalSince1970)
            expectStatus(200, try await status(claims(extra: ["iss": issuer, "aud": "deltasnap-api"])))
            expectStatus(200, try await status(claims(extra: ["iss": issuer, "aud": ["other-app", "deltasnap-api"]])))
            expectStatus(401, try await status(claims(extra: ["iss": "https://elsewhere.test/", "aud": "deltasnap-api"])))
            expectStatus(401, try await status(claims(extra: ["aud": "deltasnap-api"])))
            #expect(refusals(server, "wrong_issuer") == 2)
            expectStatus(401, try await status(claims(extra: ["iss": issuer, "aud": "other-app"])))
            #expect(refusals(server, "wrong_audience") == 1)
            // Within the 60 s leeway of exp, and past it.
            expectStatus(200, try await status(claims("late", expiresIn: -20, extra: ["iss": issuer, "aud": "deltasnap-api"])))
            expectStatus(401, try await status(claims(expiresIn: -120, extra: ["iss": issuer, "aud": "deltasnap-api"])))
            #expect(refusals(server, "expired") == 1)
            expectStatus(401, try await status(claims(extra: ["iss": issuer, "aud": "deltasnap-api", "nbf": now + 600])))
            expectStatus(401, try await status(claims(extra: ["iss": issuer, "aud": "deltasnap-api", "iat": now + 600])))
            #expect(refusals(server, "not_yet_valid") == 2)
            expectStatus(200, try await status(claims("early", extra: ["iss": issuer, "aud": "deltasnap-api", "nbf": now + 20, "iat": now + 20])))
        }
    }

    /// The goal of the issue: a rotation reaches the server without a restart and without one
    /// refused valid token; a key the provider withdrew verifies nothing afterwards, not even a
    /// token verified before with it.
    @Test func aRotationRefusesNoValidTokenAndAWithdrawnKeyVerifiesNothing() async throws {
        let provider = try await PythonIdentityProvider.start()
        defer { provider.stop() }
        try await provider.get("/key?kid=old&type=rsa")
        try await provider.get("/key?kid=new&type=rsa")
        try await provider.get("/publish?kids=old&max_age=0")
        var policy = KeySetRefreshPolicy()
        policy.minimumAge = 0
        try await withServer(provider, policy: policy) { server, keySet in
            let oldToken = try await provider.mint(kid: "old", claims: claims("before"))
            #expect(try await push(server, token: oldToken) == 200)
            // The overlap: both published; the provider starts signing with the new key.
            try await provider.get("/publish?kids=old,new")
            #expect(try await push(server, token: try await provider.mint(kid: "new", claims: claims("first-new"))) == 200)
            #expect(try await push(server, token: try await provider.mint(kid: "old", claims: claims("late-old"))) == 200)
            #expect(try await push(server, token: oldToken) == 200)
            // The old key withdrawn: once the server has refetched the set (it is stale at once
            // here), no token of the old key verifies, the one it answered from memory included.
            try await provider.get("/publish?kids=new")
            var withdrawn = false
            for attempt in 0..<250 where !withdrawn {
                #expect(try await push(server, token: try await provider.mint(kid: "new", claims: claims("during-\(attempt)"))) == 200)
                withdrawn = keySet.keyIdentifiers == ["new"]
                if !withdrawn { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(withdrawn)
            #expect(try await push(server, token: oldToken) == 401)
            #expect(try await push(server, token: try await provider.mint(kid: "old", claims: claims("after")) ) == 401)
        }
    }

    @Test func theLastGoodSetIsKeptWhileTheProviderIsDown() async throws {
        let provider = try await PythonIdentityProvider.start()
        defer { provider.stop() }
        try await provider.get("/key?kid=a&type=ed")
        try await provider.get("/key?kid=b&type=ed")
        try await provider.get("/publish?kids=a&max_age=0")
        var policy = KeySetRefreshPolicy()
        policy.minimumAge = 0
        policy.retryDelay = 0.01
        policy.unknownKidInterval = 0.05
        try await withServer(provider, policy: policy) { server, _ in
            try await provider.get("/down?on=1")
            let before = try await provider.fetches()
            var attempts = 0
            // Tokens keep verifying with the last good set while every refetch fails.
            while try await provider.fetches() < before + 3 && attempts < 250 {
                #expect(try await push(server, token: try await provider.mint(kid: "a", claims: claims("down-\(attempts)"))) == 200)
                attempts += 1
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(try await provider.fetches() >= before + 3)
            #expect(try await push(server, token: try await provider.mint(kid: "b", claims: claims())) == 401)
            // Back, rotated: the new key is found.
            try await provider.get("/publish?kids=a,b")
            try await provider.get("/down?on=0")
            var accepted = false
            for attempt in 0..<250 where !accepted {
                accepted = try await push(server, token: try await provider.mint(kid: "b", claims: claims("back-\(attempt)"))) == 200
                if !accepted { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(accepted)
        }
    }

    @Test func claimsAreReadWhereTheProviderPutsThem() async throws {
        let provider = try await PythonIdentityProvider.start()
        defer { provider.stop() }
        try await provider.get("/key?kid=k&type=rsa")
        try await provider.get("/publish?kids=k")
        var mapping = ClaimMapping()
        mapping.subject = "https://example.com/user.id"
        mapping.write = "https://example.com/app.collections"
        try await withServer(provider, claims: mapping) { server, _ in
            let now = Int(Date().timeIntervalSince1970)
            let nested: [String: Any] = [
                "sub": "auth0|123", "exp": now + 600,
                "https://example.com/user": ["id": "alice"], "https://example.com/app": ["collections": "notes other"],
            ]
            expectStatus(200, try await push(server, token: try await provider.mint(kid: "k", claims: nested)))
            var noRight = nested
            noRight["https://example.com/app"] = ["collections": ["other"]]
            expectStatus(403, try await push(server, token: try await provider.mint(kid: "k", claims: noRight)))
            var noSubject = nested
            noSubject["https://example.com/user"] = nil
            expectStatus(401, try await push(server, token: try await provider.mint(kid: "k", claims: noSubject)))
            #expect(refusals(server, "claims") == 1)
        }
    }

    @Test func claimPathsMatchURLNamedClaimsWhole() {
        let claims: [String: ClaimValue] = [
            "realm_access": .object(["roles": .array([.string("editor")])]),
            "cognito:groups": .array([.string("reviewer")]),
            "https://example.com/roles": .array([.string("admin")]),
            "https://example.com/app": .object(["roles": .string("a b")]),
        ]
        #expect(ClaimPath("realm_access.roles").value(in: claims) == .array([.string("editor")]))
        #expect(ClaimPath("cognito:groups").value(in: claims) == .array([.string("reviewer")]))
        #expect(ClaimPath("https://example.com/roles").value(in: claims) == .array([.string("admin")]))
        #expect(ClaimPath("https://example.com/app.roles").value(in: claims) == .string("a b"))
        #expect(ClaimPath("realm_access.missing").value(in: claims) == nil)
    }

    @Test func theScheduleBoundsRefetches() {
        let policy = KeySetRefreshPolicy()
        #expect(policy.age(for: 15) == 300)
        #expect(policy.age(for: 7 * 86_400) == 86_400)
        #expect(policy.age(for: nil) == 3600)
        let start = Date(timeIntervalSince1970: 1_000_000)
        var schedule = KeySetSchedule(policy: policy, fetchedAt: start, maxAge: 600)
        #expect(!schedule.isStale(at: start.addingTimeInterval(599)))
        #expect(schedule.isStale(at: start.addingTimeInterval(600)))
        let first = schedule.mayFetchForUnknownKid(at: start)
        let tooSoon = schedule.mayFetchForUnknownKid(at: start.addingTimeInterval(29))
        let later = schedule.mayFetchForUnknownKid(at: start.addingTimeInterval(30))
        #expect(first && !tooSoon && later)
        schedule.failed(at: start.addingTimeInterval(600))
        #expect(!schedule.isStale(at: start.addingTimeInterval(629)))
        #expect(schedule.isStale(at: start.addingTimeInterval(630)))
        schedule.failed(at: start.addingTimeInterval(630))
        #expect(!schedule.isStale(at: start.addingTimeInterval(689)))
    }

    @Test func aKeySetThatCannotBeHadIsOneClearError() async throws {
        do {
            _ = try await JWKSKeySource(url: "http://127.0.0.1:9/jwks.json")
            Issue.record("an unreachable key set was accepted")
        } catch {
            #expect(error is KeySetError && "\(error)".contains("http://127.0.0.1:9/jwks.json cannot be fetched"))
        }
        do {
            _ = try await JWKSKeySource(url: "http://example.com/jwks.json")
            Issue.record("an http:// key set off loopback was accepted")
        } catch {
            #expect("\(error)".contains("https://"))
        }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try dir.write("jwks.json", #"{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]}"#)
        do {
            _ = try await JWKSKeySource(file: path)
            Issue.record("a key set with no signing key was accepted")
        } catch {
            #expect("\(error)".contains("no signing key") && !"\(error)".contains("\n"))
        }
    }

    /// `deltasnap token --private-key`: an ES256 token under a kid, verified from a key set file.
    @Test func aTokenSignedWithAPrivateKeyVerifiesFromAKeySetFile() async throws {
        let key = P256.Signing.PrivateKey()
        let raw = key.publicKey.rawRepresentation
        func base64URL(_ bytes: some DataProtocol) -> String {
            Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let set = #"{"keys":[{"kty":"EC","crv":"P-256","kid":"dev-1","x":"\#(base64URL(raw.prefix(32)))","y":"\#(base64URL(raw.suffix(32)))"}]}"#
        let path = try dir.write("jwks.json", set)
        var policy = AccessPolicy()
        policy.keySets = [try await JWKSKeySource(file: path)]
        let token = try await AccessClaims(subject: "dev", expires: Date().addingTimeInterval(600), write: ["notes"], read: [])
            .signed(privateKeyPEM: key.pemRepresentation, kid: "dev-1")
        let verified = try await TokenVerifier(staticKeys: Task { [] }, hasStaticKeys: false, policy: policy).verify(token)
        #expect(verified.claims.sub.value == "dev")
    }
}
