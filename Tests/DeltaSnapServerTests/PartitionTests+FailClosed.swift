import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// What a third-party security tester checks from outside (docs/PROTOCOL.md §5.4, §10.2):
/// memberships fail closed, metrics are the operator's, nothing private is kept by an HTTP
/// cache, and each point the docs decide is answered as written.
extension PartitionTests {
    /// Role values a backend might write to "revoke" or by mistake: each grants nothing.
    static let rolesThatGrantNothing: [(label: String, member: String)] = [
        ("none", #","role":"none""#), ("empty", #","role":"""#), ("missing", ""), ("null", #","role":null"#),
        ("READ", #","role":"READ""#), ("revoked", #","role":"revoked""#), ("1", #","role":1"#), ("[write]", #","role":["write"]"#),
    ]

    @Test(arguments: TestBackend.allCases) func aMembershipGrantsOnlyWithTheRoleReadOrWrite(_ backend: TestBackend) async throws {
        try await withServer(backend) { f in
            for (label, member) in Self.rolesThatGrantNothing {
                // Written straight into the store, as an older backend or a bulk load may have.
                let written = try await f.store.importText(#"{"id":"sets/8271"\#(member)}"#, collection: "members/carol")
                try await f.server.waitForToken(written.head?.token, of: "members/carol")
                let read = try await f.request("GET", "/v1/collections/sets/partitions/8271", as: "carol")
                #expect(read.status == 404 && read.text.contains("unknown_collection"), "role \(label): \(read.status)")
                let push = try await f.request(
                    "POST", "/v1/collections/sets/partitions/8271/mutations", as: "carol",
                    body: #"{"client":"c1","mutations":[{"seq":1,"op":"put","id":"q9","value":{"v":1}}]}"#)
                #expect(push.status == 404, "role \(label): \(push.status)")
                #expect(try await f.view(as: "carol") == ["countries", "members/carol"], "role \(label)")
            }
            // The two roles that grant, on the same record.
            let granted = try await f.store.importText(#"{"id":"sets/8271","role":"read"}"#, collection: "members/carol")
            try await f.server.waitForToken(granted.head?.token, of: "members/carol")
            #expect(try await f.request("GET", "/v1/collections/sets/partitions/8271", as: "carol").status == 200)
            #expect(try await f.view(as: "carol") == ["countries", "members/carol", "sets/8271"])
        }
    }

    @Test(arguments: TestBackend.allCases) func writesOfMembershipsThatGrantNothingAreRefusedWhole(_ backend: TestBackend) async throws {
        try await withServer(backend) { f in
            let before = try await f.store.store.head(of: "members/alice")
            let record = "/v1/collections/members/partitions/alice/records/\("sets/9000".percentEncodedPathSegment)"
            for (label, member) in Self.rolesThatGrantNothing {
                let put = try await f.request("PUT", record, as: "admin", body: #"{"id":"sets/9000"\#(member)}"#)
                #expect(put.status == 400 && put.text.contains(#""error":"bad_membership""#), "PUT role \(label): \(put.text)")
            }
            // A batch: one line per bad record, nothing committed.
            let batch = #"{"id":"sets/1","role":"READ"}"# + "\n" + #"{"id":"sets/2","role":"read"}"# + "\n" + #"{"id":"nopartition","role":"write"}"# + "\n"
            let posted = try await f.request("POST", "/v1/collections/members/partitions/alice/records", as: "admin", body: batch)
            #expect(posted.status == 400, "\(posted.text)")
            let message = try #require(try JSONReader(bytes: posted.body).readValue()["message"])
            guard case .string(let lines) = message else { Issue.record("no message"); return }
            #expect(lines.split(separator: "\n").count == 2 && lines.hasPrefix("line 1: ") && lines.contains("line 3: "), "\(lines)")
            // A push: puts and patches that would leave a bad role; a patch without role and a delete pass.
            let push = #"{"client":"backend","mutations":[{"seq":1,"op":"patch","id":"sets/8271","value":{"role":"owner"}},"#
                + #"{"seq":2,"op":"put","id":"sets/7","value":{}},{"seq":3,"op":"patch","id":"sets/8271","value":{"note":"x"}},{"seq":4,"op":"delete","id":"sets/5"}]}"#
            let pushed = try await f.request("POST", "/v1/collections/members/partitions/alice/mutations", as: "admin", body: push)
            #expect(pushed.status == 400 && pushed.text.contains("mutations[0] (seq 1)") && pushed.text.contains("mutations[1] (seq 2)"), "\(pushed.text)")
            #expect(!pushed.text.contains("mutations[2]") && !pushed.text.contains("mutations[3]"))
            #expect(try await f.store.store.head(of: "members/alice")?.token == before?.token)
            // Hiding a membership (the way to revoke it) and a good role go through.
            #expect(try await f.request("PUT", record, as: "admin", body: #"{"id":"sets/9000","role":"read"}"#).status == 200)
            #expect(try await f.request("DELETE", record, as: "admin").status == 200)
        }
    }

    @Test func metricsAnswerTheAdminTokenOnlyOnThePublicAddress() async throws {
        try await withServer(.sqlite) { f in
            _ = try await f.request("GET", "/v1/collections/attempts/partitions/alice", as: "alice")
            for caller in [nil, "alice"] as [String?] {
                for method in ["GET", "HEAD"] {
                    let refused = try await f.request(method, "/metrics", as: caller)
                    #expect(refused.status == 401 && refused.header("WWW-Authenticate") != nil, "\(method) as \(caller ?? "nobody")")
                    #expect(!refused.text.contains("deltasnap_"))
                }
            }
            let wrong = try await f.request("GET", "/metrics", as: nil, headers: ["Authorization": "Bearer not-the-admin-token"])
            #expect(wrong.status == 401 && wrong.text.contains("invalid_token"))
            let admin = try await f.request("GET", "/metrics", as: "admin")
            #expect(admin.status == 200 && admin.text.contains("deltasnap_http_responses_total"))
            #expect(admin.header("Cache-Control") == "no-store")
        }
    }

    /// `serve --metrics-listen`: the counters on an address of their own, to anyone who reaches
    /// it, and nothing else there.
    @Test func aMetricsListenerServesMetricsAlone() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        _ = try await CLI.run(["import", "--db", db, "--collection", "countries", "-"], stdin: #"{"id":"AD","name":"Andorra"}"#)
        let serve = try await ServeProcess.start(["--db", db, "--metrics-listen", "127.0.0.1:0"], awaiting: ["deltasnap: metrics on "])
        defer { serve.stop() }
        let metricsLine = try #require(serve.lines.first { $0.hasPrefix("deltasnap: metrics on http://127.0.0.1:") })
        let metricsPort = try #require(Int(metricsLine.split(separator: ":").last!.split(separator: "/").first!))
        _ = try await RawHTTPClient(port: serve.port).request("GET", "/v1/collections/countries")
        let scraped = try await RawHTTPClient(port: metricsPort).request("GET", "/metrics")
        #expect(scraped.status == 200 && scraped.text.contains(#"deltasnap_collection_responses_total{outcome="full"} 1"#), "\(scraped.text.prefix(300))")
        await #expect(try RawHTTPClient(port: metricsPort).request("HEAD", "/metrics").status == 200)
        let other = try await RawHTTPClient(port: metricsPort).request("GET", "/v1/collections/countries")
        #expect(other.status == 404 && other.text.contains(#""error""#))
        await #expect(try RawHTTPClient(port: serve.port).request("GET", "/metrics").status == 401)

        let bad = try await CLI.run(["serve", "--db", db, "--metrics-listen", "nowhere"])
        #expect(bad.status == 2 && bad.stderr.contains("--metrics-listen must be HOST:PORT"), "\(bad.stderr)")
    }

    /// Every answer only some callers may read is kept by no HTTP cache, so a device's cache
    /// never serves it after access ends; public answers keep their shared-cache headers.
    @Test func privateAnswersAreKeptByNoCache() async throws {
        try await withServer(.sqlite) { f in
            let own = try await f.request("GET", "/v1/collections/attempts/partitions/alice", as: "alice")
            let token = try #require(own.header("ETag")?.trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
            _ = try await f.request("PUT", "/v1/collections/attempts/partitions/alice/records/a2", as: "admin", body: #"{"score":4}"#)
            let head = try #require(try await f.store.store.head(of: "attempts/alice")).token.description
            let base = "/v1/collections/attempts/partitions/alice"
            let answers: [(String, String)] = [
                ("GET", base), ("HEAD", base), ("GET", "\(base)/snapshots/\(head)"), ("GET", "\(base)/snapshots/\(head)?limit=1"),
                ("GET", "\(base)/deltas/\(token)/\(head)"), ("GET", "\(base)/records/a1/history"), ("GET", "/v1/index"),
            ]
            for (method, path) in answers {
                let answer = try await f.request(method, path, as: "alice")
                #expect(answer.status == 200, "\(method) \(path): \(answer.status)")
                #expect(answer.header("Cache-Control") == "private, no-store", "\(method) \(path)")
            }
            let current = try await f.request("GET", base, as: "alice", headers: ["If-None-Match": "\"\(head)\""])
            #expect(current.status == 304 && current.header("Cache-Control") == "private, no-store")
            let index = try await f.request("GET", "/v1/index", as: "alice")
            let heldView = try await f.request("GET", "/v1/index", as: "alice", headers: ["If-None-Match": index.header("ETag") ?? ""])
            #expect(heldView.status == 304 && heldView.header("Cache-Control") == "private, no-store")

            // Public: unchanged.
            let countries = try await f.request("GET", "/v1/collections/countries", as: nil)
            #expect(countries.header("Cache-Control") == "no-cache")
            let countriesToken = try #require(countries.header("ETag")?.trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
            let snapshot = try await f.request("GET", "/v1/collections/countries/snapshots/\(countriesToken)", as: nil)
            #expect(snapshot.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(try await f.request("GET", "/v1/index", as: nil).header("Cache-Control")?.hasPrefix("public, max-age=") == true)
        }
    }

    /// §5.4/§10.2: a write without a token to a partition that is not public is its `404`
    /// (it must not tell that the partition exists); to a collection anyone may read, `401`.
    @Test(arguments: TestBackend.allCases) func aWriteWithoutATokenToAHiddenPartitionIsItsNotFound(_ backend: TestBackend) async throws {
        try await withServer(backend) { f in
            for partition in ["attempts/alice", "attempts/zed", "sets/8271"] {
                let path = CollectionPath(partition)!.urlPath
                for (method, suffix, body) in [
                    ("PUT", "/records/x", #"{"v":1}"#), ("DELETE", "/records/x", ""), ("POST", "/records", #"{"id":"x"}"#),
                    ("POST", "/mutations", #"{"client":"c","mutations":[]}"#),
                ] {
                    let answer = try await f.request(method, path + suffix, as: nil, body: body)
                    #expect(answer.status == 404 && answer.text.contains("unknown_collection"), "\(method) \(partition)\(suffix): \(answer.status)")
                }
            }
            let countries = try await f.request("PUT", "/v1/collections/countries/records/x", as: nil, body: #"{"v":1}"#)
            #expect(countries.status == 401 && countries.text.contains(#""error":"unauthorized""#))
        }
    }

    /// §10.3: the admin token's view lists every collection (public or not) and no partition,
    /// with `subject` `admin`.
    @Test func theAdminTokensIndexListsEveryCollectionAndNoPartition() async throws {
        try await withServer(.sqlite) { f in
            let answer = try await f.request("GET", "/v1/index", as: "admin")
            #expect(answer.status == 200 && answer.header("Cache-Control") == "private, no-store")
            let index = try SignedIndex.parse(answer.body)
            #expect(index.entries.map(\.collection) == ["countries"])
            #expect(try JSONReader(bytes: answer.body).readValue()["index"]?["subject"] == .string("admin"))
        }
    }

    /// §10.2: `sub` is matched byte for byte against a KEY, and a `sub` that is no valid KEY
    /// owns no partition (its token still verifies: it reads what is public).
    @Test func aSubjectIsMatchedByteForByteAndOneThatIsNoKeyOwnsNothing() async throws {
        try await withServer(.sqlite) { f in
            for subject in ["", "/", "a/b", "al\u{0}ice", "ålice", "Alice", "alice ", "..", String(repeating: "a", count: 129)] {
                let token = try await f.token(subject)
                let view = try await offPool { try f.server.connect().request("GET", "/v1/index", headers: ["Authorization": "Bearer \(token)"]) }
                #expect(view.status == 200, "sub \(subject.debugDescription)")
                #expect(try SignedIndex.parse(view.body).entries.map(\.collection) == ["countries"], "sub \(subject.debugDescription)")
                let alices = try await offPool {
                    try f.server.connect().request("GET", "/v1/collections/attempts/partitions/alice", headers: ["Authorization": "Bearer \(token)"])
                }
                #expect(alices.status == 404, "sub \(subject.debugDescription)")
            }
        }
    }

    /// §10.2: `read`/`write` claims open only collections whose rule is `claims` (or that no
    /// rule names) — never an `owner` or `member` partition.
    @Test func claimsNeverOpenOwnerOrMemberPartitions() async throws {
        try await withServer(.sqlite) { f in
            let names = ["attempts", "sets", "attempts/alice", "sets/8271", "*"]
            let token = try await AccessClaims(subject: "bob", expires: Date().addingTimeInterval(600), write: names, read: names).signed(secret: Self.secret)
            let headers = ["Authorization": "Bearer \(token)"]
            for path in ["/v1/collections/attempts/partitions/alice", "/v1/collections/sets/partitions/8271"] {
                let answer = try await offPool { try f.server.connect().request("GET", path, headers: headers) }
                #expect(answer.status == 404, "\(path)")
            }
            let view = try await offPool { try f.server.connect().request("GET", "/v1/index", headers: headers) }
            #expect(try SignedIndex.parse(view.body).entries.map(\.collection) == ["attempts/bob", "countries"])
        }
    }

    /// §10.1: `{key}` (and `{name}`) may be percent-encoded — the decoded text must be a valid
    /// KEY — and an invalid one is `400 bad_collection_name` to every caller alike.
    @Test func partitionKeysMayBePercentEncodedAndInvalidOnesAreRefusedAlike() async throws {
        try await withServer(.sqlite) { f in
            let plain = try await f.request("GET", "/v1/collections/attempts/partitions/alice", as: "alice")
            let encoded = try await f.request("GET", "/v1/collections/attempts/partitions/%61lic%65", as: "alice")
            #expect(encoded.status == 200 && encoded.header("ETag") == plain.header("ETag"))
            for key in ["%2E%2E", "..", ".", "a%2Fb", "a%20b", "%FF", "a%", String(repeating: "k", count: 129)] {
                for caller in ["alice", nil] as [String?] {
                    let answer = try await f.request("GET", "/v1/collections/attempts/partitions/\(key)", as: caller)
                    #expect(answer.status == 400 && answer.text.contains("bad_collection_name"), "\(key) as \(caller ?? "nobody"): \(answer.status)")
                }
            }
        }
    }

    /// §8.1/§10.3: a commit to a partition changes no document it is not listed in (the public
    /// index keeps its `ETag`), but it raises the store's `sequence`, which the next document
    /// carries — so anyone may watch how often the store commits, and nothing more.
    @Test func theSequenceCountsCommitsStoreWide() async throws {
        try await withServer(.sqlite) { f in
            let before = try await f.request("GET", "/v1/index", as: nil)
            let sequence = try SignedIndex.parse(before.body).sequence
            _ = try await f.request("PUT", "/v1/collections/attempts/partitions/bob/records/b2", as: "admin", body: #"{"score":1}"#)
            let unchanged = try await f.request("GET", "/v1/index", as: nil, headers: ["If-None-Match": before.header("ETag") ?? ""])
            #expect(unchanged.status == 304)
            _ = try await f.request("PUT", "/v1/collections/countries/records/AD", as: "admin", body: #"{"name":"Andorra!"}"#)
            let after = try await f.request("GET", "/v1/index", as: nil)
            #expect(try SignedIndex.parse(after.body).sequence >= sequence + 2)
        }
    }
}
