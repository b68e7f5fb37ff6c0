import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Issue 45 point 4: a preview device's signed view follows the workspace — after more
/// writes, while it waits (`?wait=`), and after an approval — on each store.
extension ReviewTests {
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func aPreviewDevicesSignedViewFollowsTheWorkspace(_ backend: TestBackend) async throws {
        let key = IndexSigningKey.generate()
        try await withServer(backend, signingKeys: [key]) { fixture in
            let device = try await fixture.token("tablet", preview: true)
            let editor = try await fixture.token("ed", roles: ["editor"])
            let reviewer = try await fixture.token("rev", roles: ["reviewer"])
            let ordinary = try await fixture.token("someone")
            func put(_ id: String) async throws {
                #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/\(id)", token: TestServer.writeToken, body: #"{"id":"\#(id)"}"#).status == 200)
            }
            func entry(_ answer: RawHTTPClient.Response) throws -> SignedIndex.Entry {
                let index = try SignedIndex.parse(answer.body)
                try index.verify(trusting: [key.publicKey], now: Int64(Date().timeIntervalSince1970), heldSequence: nil)
                return try #require(index.entry(for: "catalogue"))
            }
            func view(as token: String) async throws -> (entry: SignedIndex.Entry, etag: String) {
                let answer = try await fixture.send("GET", "/v1/index", token: token)
                #expect(answer.status == 200, "\(answer.text)")
                return (try entry(answer), try #require(answer.header("ETag")))
            }
            try await put("x1")
            let first = try await view(as: device)
            #expect(first.entry.count == 101)

            // More writes: the view moves.
            try await put("x2")
            let second = try await view(as: device)
            #expect(second.entry.count == 102 && second.entry.token != first.entry.token)

            // A held request is woken by a workspace write.
            let held = Task {
                try await fixture.send("GET", "/v1/index?wait=50", token: device, headers: ["If-None-Match": second.etag])
            }
            try await put("x3")
            let woken = try await held.value
            #expect(woken.status == 200, "\(woken.status)")
            if woken.status == 200 { #expect(try entry(woken).count == 103) }

            // After an approval the view states what is published.
            try await fixture.step("request", token: editor)
            try await fixture.step("approve", token: reviewer)
            let published = try await view(as: ordinary)
            #expect(published.entry.count == 103)
            let after = try await view(as: device)
            #expect(after.entry.count == 103 && after.entry.digest == published.entry.digest)
            // And on after the approval too.
            try await put("x4")
            #expect(try await view(as: device).entry.count == 104)
            #expect(try await view(as: ordinary).entry.count == 103)
        }
    }

    /// Issue 45 point 5: a step's body is one JSON object and nothing after it, as the write
    /// API reads a record: trailing data is refused `400 invalid_json` and no step is taken.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func aStepBodyWithTrailingDataIsRefused(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)
            for body in [#"{"comment":"x"} trailing"#, "{}{}{}", "{} 1", #"{"comment":"x"}]"#] {
                let answer = try await fixture.send("POST", "/v1/collections/catalogue/review/request", token: editor, body: body)
                #expect(answer.status == 400, "\(body): \(answer.text)")
                #expect(try JSONReader(bytes: answer.body).readValue()["error"] == .string("invalid_json"), "\(answer.text)")
            }
            #expect(try await fixture.database.store.reviewState(of: "catalogue").log.isEmpty)
            // Whitespace after the object is no data.
            try await fixture.step("request", token: editor, body: "{\"comment\":\"x\"} \n")
        }
    }

    /// Issue 45 point 7: a rollback while a request waits withdraws the request — its entry
    /// names it, it leaves the queue, the next approve finds nothing pending (409), and the
    /// editor requests again.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func aRollbackWithdrawsAPendingRequest(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let reviewer = try await fixture.token("rev", roles: ["reviewer"])
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)
            try await fixture.step("request", token: editor)
            let approved = try #require(try await fixture.step("approve", token: reviewer))
            let previous = try #require(approved["entry"]?["previousVersion"])
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x2", token: TestServer.writeToken, body: #"{"id":"x2"}"#).status == 200)
            let request = try #require(try await fixture.step("request", token: editor))
            let requested = try #require(request["entry"]?["sequence"])
            #expect(try await fixture.database.store.pendingReviews(after: nil, limit: 10).map(\.path) == ["catalogue"])

            let rollback = try #require(try await fixture.step("rollback", token: reviewer, body: #"{"version":\#(CanonicalJSON.string(previous))}"#))
            #expect(rollback["entry"]?["withdrewRequest"] == requested, "\(rollback)")
            let log = try await fixture.send("GET", "/v1/collections/catalogue/review/log", token: reviewer)
            let state = try JSONReader(bytes: log.body).readValue()
            #expect(state["pending"] == .null)
            if case .array(let entries)? = state["entries"] { #expect(entries.last?["withdrewRequest"] == requested) }
            #expect(try await fixture.database.store.pendingReviews(after: nil, limit: 10).isEmpty, "the queue no longer lists it")
            try await fixture.step("approve", token: reviewer, status: 409)
            // The workspace was rolled back too (x1 gone); x2 is still there to request.
            try await fixture.step("request", token: editor)
            try await fixture.step("approve", token: reviewer)
            #expect(try await fixture.database.store.record("x2", in: "catalogue") != nil)
        }
    }

    /// PROTOCOL §13.3 as written for issue 45: the admin token approves its own request under
    /// `self-approve: false`, a JWT with `sub: "admin"` is no admin token, and a decline
    /// changes nothing (`changes: 0`).
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func theAdminTokenAndAnAdminNamedUserUnderSelfApproveFalse(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let namedAdmin = try await fixture.token("admin", roles: ["reviewer"])
            let reviewer = try await fixture.token("rev", roles: ["reviewer"])
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)
            try await fixture.step("request", token: TestServer.writeToken)
            try await fixture.step("approve", token: namedAdmin, status: 403)
            let declined = try #require(try await fixture.step("decline", token: reviewer, body: #"{"comment":"no"}"#))
            #expect(declined["entry"]?["changes"] == .number("0"))
            try await fixture.step("request", token: TestServer.writeToken)
            try await fixture.step("approve", token: TestServer.writeToken)
        }
    }

    /// Under `self-approve: true` an editor who is no reviewer decides any request.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func anEditorDecidesAnyRequestUnderSelfApproveTrue(_ backend: TestBackend) async throws {
        try await withServer(backend, selfApprove: true) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let other = try await fixture.token("ed2", roles: ["editor"])
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)
            try await fixture.step("request", token: other)
            try await fixture.step("approve", token: editor)
        }
    }
}

/// Issue 45 point 6: a rules file that is not YAML is refused in one line, exit status 1.
@Suite struct BrokenRulesFileTests {
    @Test func aRulesFileThatIsNotYAMLIsRefusedInOneLine() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let rules = dir.file("rules.yaml")
        try "collections:\n  catalogue: { read: public, write: admin\n  other: [x\n".write(toFile: rules, atomically: true, encoding: .utf8)
        let input = dir.file("in.ndjson")
        try #"{"id":"a"}"#.write(toFile: input, atomically: true, encoding: .utf8)
        let result = try await CLI.run(["import", "--rules", rules, "--db", dir.file("s.sqlite"), "--collection", "catalogue", input])
        #expect(result.status == 1)
        let said = result.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(said.contains("not YAML") && !said.contains("\n"), "\(result.stderr)")
    }
}
