import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Partitions (`NAME/KEY`) under access rules, against a real server on 127.0.0.1 on each
/// store: who sees what, the per-user view at `GET /v1/index`, memberships moving in and
/// out, and isolation (a partition one may not read answers as one that does not exist).
@Suite struct PartitionTests {
    static let secret = "partition-test-secret"
    static let rules = Fixtures.studyAppRules

    struct Fixture: Sendable {
        let server: TestServer
        let store: TestDatabase

        func token(_ subject: String) async throws -> String {
            try await AccessClaims(subject: subject, expires: Date().addingTimeInterval(600), write: [], read: []).signed(secret: PartitionTests.secret)
        }

        func request(
            _ method: String = "GET", _ path: String, as subject: String?, headers: [String: String] = [:], body: String = ""
        ) async throws -> RawHTTPClient.Response {
            var headers = headers
            if let subject { headers["Authorization"] = "Bearer \(subject == "admin" ? TestServer.writeToken : try await token(subject))" }
            let sent = headers
            return try await offPool { try server.connect().request(method, path, headers: sent, body: Array(body.utf8)) }
        }

        /// The admin (the app's backend) grants or revokes a membership.
        func setMembership(_ subject: String, _ partition: String, role: String?) async throws {
            let path = "/v1/collections/members/partitions/\(subject)/records/\(partition.percentEncodedPathSegment)"
            let response = role == nil
                ? try await request("DELETE", path, as: "admin")
                : try await request("PUT", path, as: "admin", body: #"{"id":"\#(partition)","role":"\#(role!)"}"#)
            #expect(response.status == 200, "\(response.text)")
        }

        /// The collections the caller's view lists.
        func view(as subject: String?) async throws -> [String] {
            let response = try await request("GET", "/v1/index", as: subject)
            #expect(response.status == 200)
            return try SignedIndex.parse(response.body).entries.map(\.collection)
        }
    }

    func withServer(
        _ backend: TestBackend, signingKeys: [IndexSigningKey] = [], indexLifetime: Int? = nil, _ body: @escaping @Sendable (Fixture) async throws -> Void
    ) async throws {
        let access = AccessPolicy(jwtSecret: Self.secret, rules: try AccessRules(yaml: Self.rules))
        try await TestServer.with(
            backend,
            seed: { store in
                try await store.importText(#"{"id":"AD","name":"Andorra"}"#, collection: "countries")
                try await store.importText(#"{"id":"a1","score":3}"#, collection: "attempts/alice")
                try await store.importText(#"{"id":"b1","score":5}"#, collection: "attempts/bob")
                try await store.importText(#"{"id":"q1","question":"2+2"}"#, collection: "sets/8271")
                try await store.importText(#"{"id":"sets/8271","role":"write"}"#, collection: "members/alice")
            },
            start: { try await TestServer.start(database: $0, access: access, signingKeys: signingKeys, indexLifetime: indexLifetime) }
        ) { server, store in try await body(Fixture(server: server, store: store)) }
    }

    @Test(arguments: TestBackend.allCases) func eachCallerReadsExactlyTheirSlice(_ backend: TestBackend) async throws {
        try await withServer(backend) { f in
            #expect(try await f.view(as: "alice") == ["attempts/alice", "countries", "members/alice", "sets/8271"])
            #expect(try await f.view(as: "bob") == ["attempts/bob", "countries"])
            #expect(try await f.view(as: nil) == ["countries"])
            let own = try await f.request("GET", "/v1/collections/attempts/partitions/alice", as: "alice", headers: ["Accept-Encoding": "identity"])
            #expect(own.status == 200 && own.text.contains(#""collection":"attempts/alice""#) && own.text.contains(#""id":"a1""#))
            // One reader's data: a shared cache never keeps it.
            #expect(own.header("Cache-Control") == "private, no-store")
            let again = try await f.request("GET", "/v1/collections/attempts/partitions/alice", as: "alice", headers: ["If-None-Match": own.header("ETag")!])
            #expect(again.status == 304 && again.header("Cache-Control") == "private, no-store")
            #expect(try await f.request("GET", "/v1/collections/sets/partitions/8271", as: "alice").status == 200)
            // The public collection is as before, with or without a token.
            let countries = try await f.request("GET", "/v1/collections/countries", as: nil)
            #expect(countries.status == 200 && countries.header("Cache-Control") == "no-cache")
            // Partitions are never listed to everyone.
            let list = try await f.request("GET", "/v1/collections", as: "alice")
            #expect(list.text.contains(#""name":"countries""#) && !list.text.contains("attempts"))
        }
    }

    /// Every endpoint answers another user (and no token) on a partition they may not read
    /// exactly as it answers a partition that does not exist.
    @Test(arguments: TestBackend.allCases) func aPartitionOneMayNotReadIsIndistinguishableFromNone(_ backend: TestBackend) async throws {
        try await withServer(backend) { f in
            let head = try #require(try await f.store.head(of: "attempts/alice"))
            let token = head.token.description.percentEncodedPathSegment
            let push = #"{"client":"c1","mutations":[{"seq":1,"op":"put","id":"x","value":{}}]}"#
            let endpoints: [(method: String, suffix: String, body: String)] = [
                ("GET", "", ""), ("HEAD", "", ""), ("GET", "/records/a1/history", ""),
                ("GET", "/deltas/\(token)/\(token)", ""), ("GET", "/snapshots/\(token)", ""),
                ("POST", "/mutations", push), ("PUT", "/records/x", #"{"id":"x"}"#), ("DELETE", "/records/a1", ""),
                ("POST", "/records", #"{"id":"x"}"#),
            ]
            for caller in ["bob", nil] as [String?] {
                for endpoint in endpoints {
                    let existing = try await f.request(endpoint.method, "/v1/collections/attempts/partitions/alice" + endpoint.suffix, as: caller, body: endpoint.body)
                    let missing = try await f.request(endpoint.method, "/v1/collections/attempts/partitions/zed" + endpoint.suffix, as: caller, body: endpoint.body)
                    let what = "\(endpoint.method) \(endpoint.suffix) as \(caller ?? "nobody")"
                    #expect(existing.status == 404, "\(what): \(existing.status) \(existing.text)")
                    #expect(existing.status == missing.status, "\(what)")
                    #expect(existing.text.replacingOccurrences(of: "alice", with: "zed") == missing.text, "\(what): \(existing.text) vs \(missing.text)")
                    #expect(existing.header("Cache-Control") == missing.header("Cache-Control"), "\(what)")
                }
            }
            // Nothing was written by those attempts.
            #expect(try await f.store.head(of: "attempts/alice")?.version == head.version)
            #expect(try await f.store.head(of: "attempts/zed") == nil)
            let metrics = try await f.request("GET", "/metrics", as: "admin")
            #expect(!metrics.text.contains("attempts/alice"))
        }
    }

    @Test(arguments: TestBackend.allCases) func membershipsMoveInAndOutWithoutTouchingAnythingElse(_ backend: TestBackend) async throws {
        try await withServer(backend) { f in
            #expect(try await f.request("GET", "/v1/collections/sets/partitions/8271", as: "bob").status == 404)
            let before = try await f.request("GET", "/v1/index", as: "bob")
            try await f.setMembership("bob", "sets/8271", role: "read")
            // The view changes at once (the server's own commit), and bob may read it now.
            let after = try await f.request("GET", "/v1/index", as: "bob", headers: ["If-None-Match": before.header("ETag")!])
            #expect(after.status == 200)
            #expect(try SignedIndex.parse(after.body).entries.map(\.collection) == ["attempts/bob", "countries", "members/bob", "sets/8271"])
            #expect(try await f.request("GET", "/v1/collections/sets/partitions/8271", as: "bob").status == 200)
            // A reader may not write: 403 (he knows it exists), and nothing is committed.
            let push = #"{"client":"b","mutations":[{"seq":1,"op":"put","id":"q2","value":{"question":"1+1"}}]}"#
            let refused = try await f.request("POST", "/v1/collections/sets/partitions/8271/mutations", as: "bob", body: push)
            #expect(refused.status == 403, "\(refused.text)")
            try await f.setMembership("bob", "sets/8271", role: "write")
            let written = try await f.request("POST", "/v1/collections/sets/partitions/8271/mutations", as: "bob", body: push)
            #expect(written.status == 200 && PushResponse.parse(written.body)?.results.first?.status == .applied(version: 2))
            // Revoked: refused from the next request on, as if it did not exist.
            try await f.setMembership("bob", "sets/8271", role: nil)
            #expect(try await f.request("GET", "/v1/collections/sets/partitions/8271", as: "bob").status == 404)
            let again = #"{"client":"b","mutations":[{"seq":2,"op":"put","id":"q3","value":{}}]}"#
            #expect(try await f.request("POST", "/v1/collections/sets/partitions/8271/mutations", as: "bob", body: again).status == 404)
            #expect(try await f.view(as: "bob") == ["attempts/bob", "countries", "members/bob"])
            // Alice's access never changed.
            #expect(try await f.view(as: "alice") == ["attempts/alice", "countries", "members/alice", "sets/8271"])
        }
    }

    @Test(arguments: TestBackend.allCases) func anOwnerCreatesTheirPartitionByTheFirstPush(_ backend: TestBackend) async throws {
        try await withServer(backend) { f in
            let push = #"{"client":"c","mutations":[{"seq":1,"op":"insert","id":"c1","value":{"score":1}}]}"#
            let created = try await f.request("POST", "/v1/collections/attempts/partitions/carol/mutations", as: "carol", body: push)
            #expect(created.status == 200 && PushResponse.parse(created.body)?.results.first?.status == .applied(version: 1), "\(created.text)")
            #expect(try await f.view(as: "carol") == ["attempts/carol", "countries"])
            // Not in anyone else's partition.
            #expect(try await f.request("POST", "/v1/collections/attempts/partitions/alice/mutations", as: "carol", body: push).status == 404)
            // A partition of a collection that is not partitioned, or the bare name of one
            // that is, does not exist.
            #expect(try await f.request("GET", "/v1/collections/countries/partitions/x", as: "alice").status == 404)
            #expect(try await f.request("GET", "/v1/collections/attempts", as: "alice").status == 404)
            #expect(try await f.request("GET", "/v1/collections/attempts/partitions/..", as: "alice").status != 200)
        }
    }

    /// An unchanged view is a `304` on its ETag; a view is signed with its subject, and only
    /// changes when something it lists does.
    @Test(arguments: TestBackend.allCases) func aViewIsSignedForItsSubjectAndAnsweredNotModified(_ backend: TestBackend) async throws {
        let key = IndexSigningKey.generate()
        try await withServer(backend, signingKeys: [key]) { f in
            let first = try await f.request("GET", "/v1/index", as: "alice")
            #expect(first.header("Cache-Control") == "private, no-store")
            let index = try SignedIndex.parse(first.body)
            #expect(index.subject == "alice")
            try index.verify(trusting: [key.publicKey], now: Int64(Date().timeIntervalSince1970), heldSequence: nil)
            let etag = try #require(first.header("ETag"))
            #expect(try await f.request("GET", "/v1/index", as: "alice", headers: ["If-None-Match": etag]).status == 304)
            // Bob's commit is not in alice's view: still 304.
            let push = #"{"client":"b","mutations":[{"seq":1,"op":"put","id":"b2","value":{}}]}"#
            #expect(try await f.request("POST", "/v1/collections/attempts/partitions/bob/mutations", as: "bob", body: push).status == 200)
            #expect(try await f.request("GET", "/v1/index", as: "alice", headers: ["If-None-Match": etag]).status == 304)
            // Hers is.
            #expect(try await f.request("POST", "/v1/collections/attempts/partitions/alice/mutations", as: "alice", body: push).status == 200)
            let changed = try await f.request("GET", "/v1/index", as: "alice", headers: ["If-None-Match": etag])
            #expect(changed.status == 200 && changed.header("ETag") != etag)
            #expect(try SignedIndex.parse(changed.body).entry(for: "attempts/alice")?.version == 2)
            // The public index is still public and carries no subject.
            let anonymous = try await f.request("GET", "/v1/index", as: nil)
            #expect(try SignedIndex.parse(anonymous.body).subject == nil)
            #expect(anonymous.header("Cache-Control")?.hasPrefix("public") == true)
            // A token that does not verify is refused, not treated as anonymous.
            let forged = try await offPool { try f.server.connect().request("GET", "/v1/index", headers: ["Authorization": "Bearer not.a.jwt"]) }
            #expect(forged.status == 401)
        }
    }

    /// A changed view is patched from the one kept — its moved heads put in place, what it
    /// lists not decided again — unless the caller's memberships moved or a head appeared.
    /// Through partitions it lists changing (one, then two at once), one it does not list
    /// changing, a membership added and one revoked, every answer verifies, and at the end
    /// it is entry for entry the view a server that never saw it builds from scratch.
    @Test(arguments: TestBackend.allCases) func aPatchedViewIsTheViewBuiltAfresh(_ backend: TestBackend) async throws {
        let key = IndexSigningKey.generate()
        try await withServer(backend, signingKeys: [key]) { f in
            func put(_ partition: Int, _ value: Int) async throws {
                let path = "/v1/collections/sets/partitions/s\(partition)/records/q"
                #expect(try await f.request("PUT", path, as: "admin", body: #"{"id":"q","v":\#(value)}"#).status == 200)
            }
            func view(_ etag: String?) async throws -> (status: Int, etag: String, entries: [String: SignedIndex.Entry]) {
                let response = try await f.request("GET", "/v1/index", as: "alice", headers: etag.map { ["If-None-Match": $0] } ?? [:])
                guard response.status == 200 else { return (response.status, etag ?? "", [:]) }
                let index = try SignedIndex.parse(response.body)
                try index.verify(trusting: [key.publicKey], now: Int64(Date().timeIntervalSince1970), heldSequence: nil)
                #expect(index.subject == "alice")
                return (200, try #require(response.header("ETag")), Dictionary(uniqueKeysWithValues: index.entries.map { ($0.collection, $0) }))
            }
            for partition in 0..<30 {
                try await put(partition, 0)
                if partition.isMultiple(of: 2) { try await f.setMembership("alice", "sets/s\(partition)", role: "read") }
            }
            var last = try await view(nil)
            #expect(last.entries.count == 4 + 15)

            try await put(2, 1)
            let one = try await view(last.etag)
            #expect(one.status == 200 && one.entries["sets/s2"]?.version == 2)
            #expect(one.entries.filter { $0.key != "sets/s2" } == last.entries.filter { $0.key != "sets/s2" })
            last = one

            try await put(3, 1)   // not hers
            #expect(try await view(last.etag).status == 304)

            try await put(4, 1)
            try await put(6, 1)
            let two = try await view(last.etag)
            #expect(two.entries["sets/s4"]?.version == 2 && two.entries["sets/s6"]?.version == 2 && two.entries["sets/s2"]?.version == 2)
            #expect(two.entries.count == last.entries.count)
            last = two

            // Her memberships moved (with a listed partition): decided again.
            try await f.setMembership("alice", "sets/s5", role: "read")
            try await put(8, 1)
            let moved = try await view(last.etag)
            #expect(moved.entries["sets/s5"] != nil && moved.entries["sets/s8"]?.version == 2 && moved.entries.count == last.entries.count + 1)
            try await f.setMembership("alice", "sets/s4", role: nil)
            try await put(10, 1)
            let revoked = try await view(moved.etag)
            #expect(revoked.entries["sets/s4"] == nil && revoked.entries["sets/s10"]?.version == 2 && revoked.entries.count == moved.entries.count - 1)

            // A server that never built her view, on the same store.
            let access = AccessPolicy(jwtSecret: Self.secret, rules: try AccessRules(yaml: Self.rules))
            let fresh = try await TestServer.start(database: f.store.url, access: access, signingKeys: [key])
            let token = try await f.token("alice")
            let built = try await offPool { try fresh.connect().request("GET", "/v1/index", headers: ["Authorization": "Bearer \(token)"]) }
            await fresh.stop()
            let entries = try SignedIndex.parse(built.body).entries
            #expect(Dictionary(uniqueKeysWithValues: entries.map { ($0.collection, $0) }) == revoked.entries)
        }
    }

    /// RFC 9110: the scheme is case-insensitive, and spaces around the token are not part of
    /// it — on the router's path (a token seen first) and the fast path (seen before) alike.
    @Test func theBearerSchemeIsReadInAnyCaseAndSpacing() async throws {
        try await withServer(.sqlite) { f in
            let token = try await f.token("alice")
            for header in ["Bearer \(token)", "bearer \(token)", "BEARER  \(token) ", "bEaReR \t\(token)\t"] {
                for _ in 0..<2 {
                    let response = try await offPool { try f.server.connect().request("GET", "/v1/index", headers: ["Authorization": header]) }
                    #expect(response.status == 200, "\(header.prefix(8)): \(response.status)")
                    #expect(try SignedIndex.parse(response.body).subject == "alice")
                }
            }
            for header in ["Bearer", "Bearer ", "Bearer  ", "Bearer\(token)", "Basic \(token)", "Bearer x\(token)"] {
                let response = try await offPool { try f.server.connect().request("GET", "/v1/index", headers: ["Authorization": header]) }
                #expect(response.status == 401 || (try? SignedIndex.parse(response.body).subject) == nil, "\(header.prefix(8)): \(response.status)")
            }
        }
    }

    /// A view due for re-signing (a quarter of its lifetime) is signed again with the same
    /// entries and a new `ETag`, then answered `304` on that one.
    @Test(arguments: TestBackend.allCases) func aKeptViewIsSignedAgainWhenDue(_ backend: TestBackend) async throws {
        let key = IndexSigningKey.generate()
        // Re-signed after a quarter of its lifetime: 3 s, long enough for the 304 below to
        // come before the next re-signing even on a loaded machine.
        try await withServer(backend, signingKeys: [key], indexLifetime: 12) { f in
            let first = try await f.request("GET", "/v1/index", as: "alice")
            let etag = try #require(first.header("ETag"))
            // Asked with the ETag held until the server re-signed it (a 200), bounded.
            var again = first
            let resigned = try await eventually(within: .seconds(10), every: .milliseconds(100)) {
                again = try await f.request("GET", "/v1/index", as: "alice", headers: ["If-None-Match": etag])
                return again.status != 304
            }
            #expect(resigned && again.status == 200 && again.header("ETag") != etag)
            let (before, after) = (try SignedIndex.parse(first.body), try SignedIndex.parse(again.body))
            #expect(after.entries == before.entries && after.issued > before.issued)
            try after.verify(trusting: [key.publicKey], now: Int64(Date().timeIntervalSince1970), heldSequence: before.sequence)
            #expect(try await f.request("GET", "/v1/index", as: "alice", headers: ["If-None-Match": again.header("ETag")!]).status == 304)
        }
    }
}

/// The server holds every collection's head but only the partitions in use: it serves
/// partitions it never saw (created by another process), and another writer's commit
/// reaches it whether or not the partition is still cached.
@Suite struct PartitionHeadTests {
    @Test(arguments: TestBackend.allCases) func partitionsAreReadOnDemandAndKeptFreshBeyondTheCache(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(backend, in: dir)
        try await store.importText(#"{"id":"c"}"#, collection: "countries")
        let server = try await TestServer.start(database: store.url, partitionHeadCapacity: 2)
        func poll(_ key: Int, _ etag: String? = nil) async throws -> RawHTTPClient.Response {
            let headers = etag.map { ["If-None-Match": $0] } ?? [:]
            return try await offPool { try server.connect().request("GET", "/v1/collections/sets/partitions/k\(key)", headers: headers) }
        }
        do {
            // Created after the server started, by another writer: served at once.
            for key in 0..<5 { try await store.importText(#"{"id":"q","v":0}"#, collection: "sets/k\(key)") }
            var etags: [String] = []
            for key in 0..<5 {
                let first = try await poll(key)
                #expect(first.status == 200)
                etags.append(try #require(first.header("ETag")))
            }
            // Each changes again (outside the server); five partitions, room for two.
            for key in 0..<5 { try await store.importText(#"{"id":"q","v":1}"#, collection: "sets/k\(key)") }
            for key in 0..<5 {
                // The watcher reports another writer's commit within moments (longer under load).
                var next = try await poll(key, etags[key])
                for _ in 0..<500 where next.status == 304 {
                    try await Task.sleep(for: .milliseconds(20))
                    next = try await poll(key, etags[key])
                }
                #expect(next.status == 200 && next.text.contains(#""kind":"delta""#), "k\(key): \(next.status)")
            }
            #expect(try await poll(99).status == 404)
        } catch {
            await server.stop()
            await store.stop()
            throw error
        }
        await server.stop()
        await store.stop()
    }
}

@Suite struct AccessRulesTests {
    @Test func aRulesFileIsRead() throws {
        let rules = try AccessRules(yaml: PartitionTests.rules)
        #expect(rules["attempts"] == AccessRules.Rule(partitioned: true, read: .owner, write: .owner))
        #expect(rules["countries"] == AccessRules.Rule(read: .public, write: .admin))
        // The memberships collection is its owner's to read and the backend's to write.
        #expect(rules["members"] == AccessRules.Rule(partitioned: true, read: .owner, write: .admin))
        #expect(rules.hasNonPublicReads)
    }

    @Test(arguments: [
        ("collections: [a, b]", "must map collection names"),
        ("collections:\n  notes: { read: owner, write: owner }", "partitioned: true"),
        ("collections:\n  notes: { read: everyone, write: admin }", "must be one of public, admin, owner, member, claims"),
        ("collections:\n  notes: { read: public }", "needs \"write\""),
        ("collections:\n  Notes: { read: public, write: admin }", "invalid collection name"),
        ("colections: {}", "unknown top-level key"),
        ("collections:\n  m: { read: public, write: admin }\nmemberships: m", "must be partitioned"),
        ("collections: {a: [", "not YAML"),
    ])
    func aBadRulesFileSaysWhatIsWrong(_ yaml: String, _ expected: String) {
        #expect {
            _ = try AccessRules(yaml: yaml)
        } throws: { error in
            String(describing: error).contains(expected)
        }
    }

    @Test func partitionPathsAreValidated() {
        #expect(CollectionPath("sets/8271")?.key == "8271")
        #expect(CollectionPath("attempts/alice@example.com:1")?.name == "attempts")
        #expect(CollectionPath("countries")?.key == nil)
        for bad in ["sets/", "sets/..", "sets/.", "Sets/1", "sets/a/b", "sets/a b", "/x", "sets/" + String(repeating: "k", count: 129)] {
            #expect(CollectionPath(bad) == nil, "\(bad)")
        }
        #expect(CollectionPath("sets/8271")?.urlPath == "/v1/collections/sets/partitions/8271")
    }
}
