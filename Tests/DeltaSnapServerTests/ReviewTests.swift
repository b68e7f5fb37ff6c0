import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Review before publish (docs/PROTOCOL.md §13) against a real server on 127.0.0.1, on each
/// store: writes to a reviewed collection reach no reader until a reviewer approves; the
/// approval publishes exactly what was requested as one version; decline, rollback,
/// self-approval and the audit log.
@Suite struct ReviewTests {
    static let secret = "review-test-secret"

    struct Fixture: Sendable {
        let server: TestServer
        let database: TestDatabase

        func token(_ subject: String, roles: [String] = [], preview: Bool = false) async throws -> String {
            try await AccessClaims(subject: subject, expires: Date().addingTimeInterval(600), write: [], read: [], roles: roles, preview: preview)
                .signed(secret: ReviewTests.secret)
        }

        func send(_ method: String, _ path: String, token: String?, body: String = "", headers: [String: String] = [:]) async throws -> RawHTTPClient.Response {
            var headers = headers
            if let token { headers["Authorization"] = "Bearer \(token)" }
            let sent = headers
            return try await offPool { try server.connect().request(method, path, headers: sent, body: Array(body.utf8)) }
        }

        /// A review step; returns the answer's JSON (expecting `status`).
        @discardableResult
        func step(_ step: String, _ collection: String = "catalogue", token: String, body: String = "", status: Int = 200) async throws -> JSONValue? {
            let response = try await send("POST", "\(CollectionPath(collection)!.urlPath)/review/\(step)", token: token, body: body)
            #expect(response.status == status, "\(step): \(response.text)")
            return try? JSONReader(bytes: response.body).readValue()
        }

        /// Every change under review, page by page.
        func changes(_ collection: String = "catalogue", token: String, limit: Int = 400) async throws -> [JSONValue] {
            var all: [JSONValue] = []
            var after: String?
            repeat {
                let query = "?limit=\(limit)" + (after.map { "&after=\($0.percentEncodedPathSegment)" } ?? "")
                let response = try await send("GET", "\(CollectionPath(collection)!.urlPath)/review\(query)", token: token)
                #expect(response.status == 200, "\(response.text)")
                let page = try JSONReader(bytes: response.body).readValue()
                if case .array(let list)? = page["changes"] { all += list }
                after = if case .string(let next)? = page["next"] { next } else { nil }
            } while after != nil
            return all
        }

        /// What an ordinary client (or, with `as`, a token's holder) gets for `If-None-Match: token`.
        func poll(_ collection: String = "catalogue", since token: String?, as bearer: String? = nil) async throws -> RawHTTPClient.Response {
            try await send("GET", CollectionPath(collection)!.urlPath, token: bearer, headers: token.map { ["If-None-Match": "\"\($0)\""] } ?? [:])
        }
    }

    static func rules(selfApprove: Bool) -> String {
        """
        collections:
          catalogue: { read: public, review: { editors: editor, reviewers: reviewer, self-approve: \(selfApprove) } }
          shelves: { partitioned: true, read: public, review: { editors: editor, reviewers: reviewer } }
          plain: { read: public, write: admin }
          drafts: { partitioned: true, read: owner, review: { editors: editor, reviewers: reviewer } }
        """
    }

    func withServer(
        _ backend: TestBackend, selfApprove: Bool = false, signingKeys: [IndexSigningKey] = [], _ body: @escaping @Sendable (Fixture) async throws -> Void
    ) async throws {
        let access = AccessPolicy(jwtSecret: Self.secret, rules: try AccessRules(yaml: Self.rules(selfApprove: selfApprove)))
        try await TestServer.with(
            backend, seed: { try await $0.importText(Fixtures.ndjson(0..<100), collection: "catalogue") },
            start: { try await TestServer.start(database: $0, access: access, signingKeys: signingKeys, console: true) }
        ) { server, database in try await body(Fixture(server: server, database: database)) }
    }

    static func etag(_ response: RawHTTPClient.Response) -> String? {
        response.header("ETag").map { String($0.dropFirst().dropLast()) }
    }

    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func approvedChangesReachClientsAsExactlyOneDelta(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let reviewer = try await fixture.token("rev", roles: ["reviewer"])
            let first = try await fixture.poll(since: nil)
            #expect(first.status == 200)
            let published = try #require(Self.etag(first))
            let lastModified = try #require(first.header("Last-Modified"))

            // An editor changes 3 records (a push), the data owner imports 1,000 more (the write API).
            let push = #"{"client":"ed-laptop","mutations":[{"seq":1,"op":"patch","id":"\#(SyntheticRecords.id(1))","value":{"price":11}},{"seq":2,"op":"patch","id":"\#(SyntheticRecords.id(2))","value":{"price":12}},{"seq":3,"op":"delete","id":"\#(SyntheticRecords.id(3))"}]}"#
            let pushed = try await fixture.send("POST", "/v1/collections/catalogue/mutations", token: editor, body: push)
            #expect(pushed.status == 200, "\(pushed.text)")
            let batch = (0..<1000).map { #"{"id":"new-\#(String(format: "%04d", $0))","price":\#($0)}"# }.joined(separator: "\n")
            let imported = try await fixture.send("POST", "/v1/collections/catalogue/records", token: TestServer.writeToken, body: batch)
            #expect(imported.status == 200, "\(imported.text)")

            // No reader sees any of it — but a preview device does, as the collection it will be,
            // in tokens of its own.
            let meanwhile = try await fixture.poll(since: published)
            #expect(meanwhile.status == 304)
            let device = try await fixture.token("tablet", preview: true)
            let preview = try await fixture.poll(since: nil, as: device)
            #expect(preview.status == 200 && preview.header("Cache-Control") == "private, no-store")
            let (previewHeader, previewRecords) = try Self.read(preview)
            #expect(previewHeader.collection == "catalogue" && previewRecords.count == 100 - 1 + 1000)
            let previewToken = try #require(Self.etag(preview))
            #expect(previewToken != published)
            #expect(try await fixture.poll(since: previewToken, as: device).status == 304)
            #expect(try await fixture.poll(since: published, as: try await fixture.token("someone")).status == 304, "an ordinary token sees the published state")

            // The reviewer sees exactly those diffs.
            let changes = try await fixture.changes(token: reviewer)
            #expect(changes.count == 1003)
            let kinds = Dictionary(grouping: changes, by: { if case .string(let kind)? = $0["change"] { kind } else { "" } }).mapValues(\.count)
            #expect(kinds == ["added": 1000, "changed": 2, "removed": 1])
            let price = changes.first { $0["id"] == .string(SyntheticRecords.id(1)) }
            guard case .array(let members)? = price?["members"], members.count == 1 else { Issue.record("one member changed: \(String(describing: price))"); return }
            #expect(members[0]["member"] == .string("price") && members[0]["new"] == .number("11") && members[0]["old"] != nil)

            try await fixture.step("request", token: editor, body: #"{"comment":"spring prices"}"#)
            try await fixture.step("request", token: editor, status: 409)  // one request at a time
            // A write after the request stays for the next review.
            let late = #"{"client":"ed-laptop","mutations":[{"seq":4,"op":"patch","id":"\#(SyntheticRecords.id(4))","value":{"price":99}}]}"#
            #expect(try await fixture.send("POST", "/v1/collections/catalogue/mutations", token: editor, body: late).status == 200)
            try await fixture.step("approve", token: editor, status: 403)  // no self-approval here
            let approved = try #require(try await fixture.step("approve", token: reviewer, body: #"{"comment":"ok"}"#))
            #expect(approved["entry"]?["changes"] == .number("1003"))

            // An ordinary client gets exactly one delta with exactly those changes.
            let delta = try await fixture.poll(since: published)
            #expect(delta.status == 200)
            let header = try BodyReader(bytes: delta.body.first == 0x1f ? try GzipDecompressor.decompress(delta.body) : delta.body).readHeader()
            #expect(header.kind == .delta)
            #expect(header.count == 1003)
            #expect(Self.etag(delta) == (approved["token"].flatMap { if case .string(let token) = $0 { token } else { nil } }))
            let after = try #require(delta.header("Last-Modified"))
            #expect(try #require(HTTPDate.parse(after)) >= (try #require(HTTPDate.parse(lastModified))))
            let current = try #require(Self.etag(delta))
            #expect(try await fixture.poll(since: current).status == 304)

            // The late edit waits for the next review.
            let next = try await fixture.changes(token: reviewer)
            #expect(next.map { $0["id"] } == [.string(SyntheticRecords.id(4))])
            let log = try await fixture.send("GET", "/v1/collections/catalogue/review/log", token: reviewer)
            #expect(log.status == 200)
            #expect(log.text.contains(#""step":"request""#) && log.text.contains(#""step":"approve""#) && log.text.contains(#""comment":"spring prices""#))
        }
    }

    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func declineLeavesClientsAloneAndRollbackBringsAVersionBack(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let reviewer = try await fixture.token("rev", roles: ["reviewer"])
            let reader = try await fixture.token("someone")
            let v1 = try #require(Self.etag(try await fixture.poll(since: nil)))
            let put = #"{"id":"\#(SyntheticRecords.id(7))","price":700}"#
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/\(SyntheticRecords.id(7))", token: TestServer.writeToken, body: put).status == 200)
            // And one record that was not there: a rollback takes it away again.
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/new-1", token: TestServer.writeToken, body: #"{"id":"new-1"}"#).status == 200)
            try await fixture.step("request", token: editor)
            try await fixture.step("decline", token: reviewer, status: 400)  // a decline says why
            try await fixture.step("decline", token: reviewer, body: #"{"comment":"price too high"}"#)
            #expect(try await fixture.poll(since: v1).status == 304)
            try await fixture.step("approve", token: reviewer, status: 409)  // nothing requested
            #expect(try await fixture.send("GET", "/v1/collections/catalogue/review", token: reader).status == 403)

            // The workspace kept the change: request again, approve, then roll it back.
            try await fixture.step("request", token: editor)
            let approved = try #require(try await fixture.step("approve", token: reviewer))
            let previous = try #require(approved["entry"]?["previousVersion"])
            let v2 = try #require(Self.etag(try await fixture.poll(since: v1)))
            #expect(v2 != v1)
            try await fixture.step("rollback", token: editor, body: #"{"version":\#(CanonicalJSON.string(previous))}"#, status: 403)
            try await fixture.step("rollback", token: reviewer, body: #"{"version":\#(CanonicalJSON.string(previous))}"#)
            let back = try await fixture.poll(since: v2)
            #expect(back.status == 200)
            let (header, records) = try Self.read(back)
            #expect(header.kind == .delta && records.count == 2)
            // The record is as it was at the version rolled back to; the new one is gone.
            let original = try #require(try await fixture.database.store.record(SyntheticRecords.id(7), in: "catalogue"))
            #expect(records.first { $0.id == SyntheticRecords.id(7) }?.bytes == original.bytes)
            #expect(records.first { $0.id == "new-1" }?.isHidden == true)
            #expect(try await fixture.database.store.record("new-1", in: "catalogue") == nil)
            #expect(try await fixture.changes(token: reviewer).isEmpty, "the workspace was rolled back too")
            // Its history is what the publications replaced: the approved price by the rollback,
            // the original by the approval (written before review: version 0).
            let history = try await fixture.send("GET", "/v1/collections/catalogue/records/\(SyntheticRecords.id(7))/history", token: reader)
            #expect(history.status == 200)
            let entries = try JSONReader(bytes: history.body).readValue()["history"]
            guard case .array(let list)? = entries, list.count == 2 else { Issue.record("history: \(history.text)"); return }
            #expect(list[0]["value"]?["price"] == .number("700") && list[0]["replacedIn"] == .number("3") && list[0]["version"] == .number("2"))
            #expect(list[1]["value"].map { try? Record(parsing: $0).bytes } == original.bytes && list[1]["replacedIn"] == .number("2"))
            #expect(list[1]["version"] == .number("0") && list[0]["replacedBy"] == .string("review"))
            // The same records digest the same, workspace or published: a preview device checks
            // the workspace against a signed entry of the collection's name.
            let digests = try await fixture.database.store.publishedState(of: ["catalogue", ReviewPaths.workspace(of: "catalogue")]).entries.map(\.digest)
            #expect(digests.count == 2 && digests[0] == digests[1], "\(digests)")
            // The console lists the versions, newest first: the seed, the approval, the rollback.
            #expect(try await fixture.database.store.versions(of: "catalogue", limit: 10).map(\.version) == [3, 2, 1])
            try await fixture.step("rollback", token: reviewer, body: #"{"version":1000}"#, status: 400)
            try await fixture.step("request", token: editor, status: 409)  // nothing to review
        }
    }

    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func selfApprovalWhenTheRuleAllowsItAndPartitionsReviewedOnTheirOwn(_ backend: TestBackend) async throws {
        try await withServer(backend, selfApprove: true) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let other = try await fixture.token("ed2", roles: ["editor"])
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)
            try await fixture.step("request", token: editor)
            try await fixture.step("approve", token: editor)
            #expect(try await fixture.database.store.record("x1", in: "catalogue") != nil)

            // A partition is reviewed on its own; a user without the role cannot write it.
            #expect(try await fixture.send("PUT", "/v1/collections/shelves/partitions/s1/records/b1", token: TestServer.writeToken, body: #"{"id":"b1"}"#).status == 200)
            let plain = try await fixture.token("user")
            let refused = try await fixture.send("POST", "/v1/collections/shelves/partitions/s1/mutations", token: plain, body: #"{"client":"c","mutations":[{"seq":1,"op":"put","id":"b2","value":{}}]}"#)
            #expect(refused.status == 403)
            #expect(try await fixture.poll("shelves/s1", since: nil).status == 404, "nothing published yet")
            try await fixture.step("request", "shelves/s1", token: other)
            try await fixture.step("approve", "shelves/s1", token: editor, status: 403)  // self-approve is off for shelves
            try await fixture.step("approve", "shelves/s1", token: try await fixture.token("rev", roles: ["reviewer"]))
            #expect(try await fixture.poll("shelves/s1", since: nil).status == 200)
            // The reserved collections are never served.
            #expect(try await fixture.send("GET", "/v1/collections/deltasnap-review-work/partitions/catalogue", token: TestServer.writeToken).status == 404)
            #expect(try await fixture.send("GET", "/v1/collections/plain/review", token: TestServer.writeToken).status == 404)
            // Fail closed: the form a rule does not have, and a private partition asked without a token.
            #expect(try await fixture.send("POST", "/v1/collections/catalogue/partitions/x/review/request", token: TestServer.writeToken).status == 404)
            #expect(try await fixture.send("GET", "/v1/collections/shelves/review", token: TestServer.writeToken).status == 404)
            #expect(try await fixture.send("GET", "/v1/collections/drafts/partitions/alice/review", token: nil).status == 404)
            #expect(try await fixture.send("GET", "/v1/collections/drafts/partitions/alice/review", token: try await fixture.token("bob")).status == 404)
        }
    }

    /// Two instances of one store (a load balancer with no affinity): approvals sent to both at
    /// once publish once; the other finds nothing pending (the step holds the store's lock).
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func approvalsOnTwoInstancesAtOncePublishOnce(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let second = try await TestServer.start(
                database: fixture.database.url, access: AccessPolicy(jwtSecret: Self.secret, rules: try AccessRules(yaml: Self.rules(selfApprove: false))))
            try await second.stopping {
                let editor = try await fixture.token("ed", roles: ["editor"])
                let reviewer = try await fixture.token("rev", roles: ["reviewer"])
                let batch = (0..<2000).map { #"{"id":"n\#($0)","v":\#($0)}"# }.joined(separator: "\n")
                #expect(try await fixture.send("POST", "/v1/collections/catalogue/records", token: TestServer.writeToken, body: batch).status == 200)
                try await fixture.step("request", token: editor)
                let servers = [fixture.server, second]
                let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                    for server in servers {
                        group.addTask {
                            try await offPool {
                                try server.connect().request("POST", "/v1/collections/catalogue/review/approve", headers: ["Authorization": "Bearer \(reviewer)"], body: []).status
                            }
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(statuses.sorted() == [200, 409], "\(statuses)")
                let log = try await fixture.database.store.reviewState(of: "catalogue").log
                #expect(log.map(\.step) == [.request, .approve])
                #expect(try await fixture.database.store.head(of: "catalogue")?.version == 2)
            }
        }
    }

    /// PROTOCOL.md §13.5: a preview device syncs signed data too — its view of the index lists
    /// the workspace under the collection's name, with its own token and the digest of its
    /// records under that name, and the token-named snapshot answers the workspace.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func aPreviewDeviceChecksTheWorkspaceAgainstTheSignedIndex(_ backend: TestBackend) async throws {
        let key = IndexSigningKey.generate()
        try await withServer(backend, signingKeys: [key]) { fixture in
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1","v":1}"#).status == 200)
            let device = try await fixture.token("tablet", preview: true)
            let ordinary = try await fixture.token("someone")
            let now = Int64(Date().timeIntervalSince1970)
            func entry(as token: String) async throws -> SignedIndex.Entry {
                let answer = try await fixture.send("GET", "/v1/index", token: token)
                #expect(answer.status == 200, "\(answer.text)")
                let index = try SignedIndex.parse(answer.body)
                try index.verify(trusting: [key.publicKey], now: now, heldSequence: nil)
                return try #require(index.entry(for: "catalogue"))
            }
            let previewed = try await entry(as: device)
            let published = try await entry(as: ordinary)
            #expect(previewed.token != published.token)
            #expect(previewed.count == 101 && published.count == 100)
            let snapshot = try await fixture.send("GET", "/v1/collections/catalogue/snapshots/\(previewed.token.percentEncodedPathSegment)", token: device)
            #expect(snapshot.status == 200 && snapshot.header("Cache-Control")?.hasPrefix("private") == true, "\(snapshot.status) \(snapshot.text.prefix(200))")
            let (header, records) = try Self.read(snapshot)
            #expect(header.collection == "catalogue" && header.token == previewed.token)
            var digest = StateDigest.empty
            for record in records { digest.add(collection: "catalogue", id: record.id, canonical: record.bytes) }
            #expect(digest.fingerprint == previewed.digest)
            // Without the preview claim, the workspace's token is no token of the collection.
            #expect(try await fixture.send("GET", "/v1/collections/catalogue/snapshots/\(previewed.token.percentEncodedPathSegment)", token: ordinary).status == 404)
        }
    }

    static func read(_ response: RawHTTPClient.Response) throws -> (BodyHeader, [Record]) {
        let bytes = response.body.first == 0x1f ? try GzipDecompressor.decompress(response.body) : response.body
        let reader = BodyReader(bytes: bytes)
        let header = try reader.readHeader()
        var records: [Record] = []
        while let record = try reader.nextRecord() { records.append(record) }
        return (header, records)
    }

    /// The console's queue lists every request waiting for a decision, partitions' included,
    /// and drops it once decided; its sizes are the bytes of a path's visible records at its
    /// head, counted again once a write makes a new version.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func theConsoleListsWaitingRequestsAndCountsBytes(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let reviewer = try await fixture.token("rev", roles: ["reviewer"])
            func overview() async throws -> JSONValue {
                let answer = try await fixture.send("GET", "/v1/console/overview", token: TestServer.writeToken)
                #expect(answer.status == 200, "\(answer.text)")
                return try JSONReader(bytes: answer.body).readValue()
            }
            func queued() async throws -> [String] {
                guard case .array(let list)? = try await overview()["queue"] else { return [] }
                return list.compactMap { if case .string(let path)? = $0["path"] { path } else { nil } }
            }
            #expect(try await queued() == [])
            let push = #"{"client":"ed","mutations":[{"seq":1,"op":"put","id":"b1","value":{"n":1}}]}"#
            #expect(try await fixture.send("POST", "/v1/collections/shelves/partitions/s7/mutations", token: editor, body: push).status == 200)
            try await fixture.step("request", "shelves/s7", token: editor)
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)
            try await fixture.step("request", token: editor)
            #expect(try await queued() == ["catalogue", "shelves/s7"])
            try await fixture.step("decline", "shelves/s7", token: reviewer, body: #"{"comment":"no"}"#)
            try await fixture.step("approve", token: reviewer)
            #expect(try await queued() == [])
            // Only the admin token reads the console.
            #expect(try await fixture.send("GET", "/v1/console/overview", token: reviewer).status == 401)

            func size(_ path: String) async throws -> (bytes: Int, version: Int)? {
                let answer = try await fixture.send("GET", "/v1/console/sizes?collection=\(path.percentEncodedPathSegment)&collection=missing", token: TestServer.writeToken)
                #expect(answer.status == 200, "\(answer.text)")
                guard case .array(let sizes)? = try JSONReader(bytes: answer.body).readValue()["sizes"], sizes.count == 1,
                      case .number(let bytes)? = sizes[0]["bytes"], case .number(let version)? = sizes[0]["version"] else { return nil }
                return (Int(bytes)!, Int(version)!)
            }
            let exported = try await fixture.database.export("catalogue")
            let expected = exported.split(separator: "\n").reduce(0) { $0 + $1.utf8.count }
            let counted = try #require(try await size("catalogue"))
            #expect(counted.bytes == expected)
            #expect(try await size("catalogue")?.bytes == expected)  // kept
            try await fixture.step("rollback", token: reviewer, body: #"{"version":1}"#)
            let after = try #require(try await size("catalogue"))
            #expect(after.version == counted.version + 1 && after.bytes == expected - #"{"id":"x1"}"#.utf8.count)
            #expect(try await fixture.send("GET", "/v1/console/sizes", token: TestServer.writeToken).status == 400)
        }
    }

}
