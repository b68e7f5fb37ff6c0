import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Issue 45's docs points on review and tokens, as PROTOCOL §5.2, §13 and §13.5 write them:
/// odd `roles` claims, the rules forms a review takes, what `GET /v1/collections` shows a
/// preview token and the `Cache-Control` it answers.
extension ReviewTests {
    /// A server with the rules `yaml` over 100 records of `catalogue` (when `catalogue` is
    /// one of them).
    func withRules(_ backend: TestBackend, _ yaml: String, _ body: @escaping @Sendable (Fixture) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(backend, in: dir)
        try await database.importText(Fixtures.ndjson(0..<100), collection: "catalogue")
        var server: TestServer?
        do {
            server = try await TestServer.start(
                database: database.url, access: AccessPolicy(jwtSecret: Self.secret, rules: try AccessRules(yaml: yaml)))
            try await body(Fixture(server: server!, database: database))
        } catch {
            await server?.stop()
            await database.stop()
            throw error
        }
        await server?.stop()
        await database.stop()
    }

    /// An editor's write: a push of one record (the write API is the admin token's).
    static func push(_ fixture: Fixture, _ collection: String, _ id: String, token: String) async throws -> Int {
        let body = #"{"client":"c-\#(id)","mutations":[{"seq":1,"op":"put","id":"\#(id)","value":{"v":1}}]}"#
        let answer = try await fixture.send("POST", "\(CollectionPath(collection)!.urlPath)/mutations", token: token, body: body)
        if answer.status == 200 { #expect(answer.text.contains(#""status":"applied""#), "\(answer.text)") }
        return answer.status
    }

    static func errorCode(_ answer: RawHTTPClient.Response) -> String? {
        if case .string(let code)? = try? JSONReader(bytes: answer.body).readValue()["error"] { code } else { nil }
    }

    /// A `roles` claim that is neither a list of strings nor one string refuses the whole
    /// token (`401 invalid_token`, a JSON body): the `"reviewer"` in `[1, null, "reviewer"]`
    /// does not count. Names in a list are matched exactly (`" reviewer "` is another role:
    /// `403`); the one-string form splits at spaces and commas, so its padding is no part of
    /// a name.
    @Test(.timeLimit(.minutes(3)))
    func oddRolesClaimsFailClosed() async throws {
        try await withServer(.sqlite) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)
            try await fixture.step("request", token: editor)
            let exp = Int(Date().timeIntervalSince1970) + 600
            func token(roles: String) -> String {
                PushEndpointTests.handSigned(#"{"sub":"rev","exp":\#(exp),"roles":\#(roles)}"#, secret: ReviewTests.secret)
            }
            for roles in [#"[1, null, "reviewer"]"#, #"["reviewer", ["editor"]]"#, #"[null]"#, #"{"reviewer": true}"#, "true", "7"] {
                for (method, path) in [("POST", "/v1/collections/catalogue/review/approve"), ("GET", "/v1/collections/catalogue/review"),
                                       ("PUT", "/v1/collections/catalogue/records/x2")] {
                    let answer = try await fixture.send(method, path, token: token(roles: roles), body: method == "GET" ? "" : #"{"id":"x2"}"#)
                    #expect(answer.status == 401, "\(roles) \(method) \(path): \(answer.text)")
                    #expect(Self.errorCode(answer) == "invalid_token" && answer.text.contains(#"claim \"roles\""#), "\(roles): \(answer.text)")
                    #expect(answer.header("Content-Type") == "application/json")
                }
            }
            for roles in [#"[" reviewer "]"#, #"["Reviewer"]"#, #"["reviewer,editor"]"#, "[]", "null", #""""#] {
                let answer = try await fixture.send("POST", "/v1/collections/catalogue/review/approve", token: token(roles: roles))
                #expect(answer.status == 403 && Self.errorCode(answer) == "forbidden", "\(roles): \(answer.text)")
                #expect(answer.text.contains(#"role \"reviewer\""#), "\(answer.text)")
            }
            #expect(try await fixture.database.store.reviewState(of: "catalogue").pending != nil, "nothing was decided")
            // One string of names: spaces and commas separate them.
            try await fixture.step("approve", token: token(roles: #"" reviewer ,editor""#))
        }
    }

    /// The rules forms of a review, as PROTOCOL §13 lists them: YAML 1.2 booleans only, one
    /// role without spaces around it, each problem in one line with its line and key.
    @Test func theRulesFormsOfAReview() throws {
        func refusal(_ yaml: String) -> String? {
            do {
                _ = try AccessRules(yaml: yaml)
                return nil
            } catch {
                return error.description
            }
        }
        for word in ["yes", "no", "on", "off", "Yes", "\"true\"", "1"] {
            let said = refusal("collections:\n  catalogue: { read: public, review: { editors: editor, reviewers: reviewer, self-approve: \(word) } }\n")
            #expect(said?.hasPrefix(#"the rules file is not usable: line 2: "self-approve" of "catalogue" must be true or false"#) == true, "\(word): \(said ?? "accepted")")
            #expect(said?.contains("\n") == false)
        }
        #expect(refusal("collections:\n  catalogue: { read: public, review: { editors: editor, reviewers: reviewer, self-approve: yes } }\n")?
            .hasSuffix(#"must be true or false, not "yes""#) == true)
        let block = """
            collections:
              plain: { read: public, write: admin }
              drafts:
                partitioned: on
                read: owner
                write: owner
            """
        #expect(refusal(block) == #"the rules file is not usable: line 4: "partitioned" of "drafts" must be true or false, not "on""#)
        #expect(refusal("collections:\n  c: { read: public, review: { editors: \" editor \", reviewers: reviewer } }\n")?
            .contains(#"line 2: "editors" of "c" is " editor ": a role has no spaces around it"#) == true)
        #expect(refusal("collections:\n  c: { read: public, review: { editors: [a, b], reviewers: reviewer } }\n")?
            .contains(#"needs "editors": one JWT role"#) == true)
        #expect(refusal("collections:\n  c:\n    read: public\n    review: { editors: e, reviewers: r, approvers: x }\n")?
            .contains(#"line 4: unknown key "approvers""#) == true)

        // Accepted: true/false in any case YAML 1.2 allows, one role as editor and reviewer,
        // review on partitions whatever their read audience.
        let accepted = try AccessRules(yaml: """
            collections:
              a: { read: public, review: { editors: staff, reviewers: staff, self-approve: True } }
              b: { partitioned: true, read: owner, review: { editors: editor, reviewers: reviewer } }
              c: { partitioned: true, read: claims, review: { editors: editor, reviewers: reviewer, self-approve: FALSE } }
              d: { partitioned: true, read: member, review: { editors: editor, reviewers: reviewer } }
            memberships: members
            """)
        #expect(accepted["a"]?.review == ReviewSettings(editors: "staff", reviewers: "staff", selfApprove: true))
        #expect(accepted["b"] == AccessRules.Rule(partitioned: true, read: .owner, write: .admin, review: ReviewSettings(editors: "editor", reviewers: "reviewer")))
        #expect(accepted["c"]?.read == .claims && accepted["c"]?.review?.selfApprove == false)
    }

    /// One role as editors and reviewers: its holders review each other's requests; under
    /// `self-approve: false` never their own.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func oneRoleEditsAndReviews(_ backend: TestBackend) async throws {
        try await withRules(backend, "collections:\n  catalogue: { read: public, review: { editors: staff, reviewers: staff } }\n") { fixture in
            let ann = try await fixture.token("ann", roles: ["staff"])
            let bob = try await fixture.token("bob", roles: ["staff"])
            #expect(try await Self.push(fixture, "catalogue", "x1", token: ann) == 200)
            try await fixture.step("request", token: ann)
            try await fixture.step("approve", token: ann, status: 403)
            try await fixture.step("approve", token: bob)
            #expect(try await fixture.poll(since: nil).text.contains(#""id":"x1""#))
        }
    }

    /// Review on `owner` and `claims` partitions: the editors (a role) write any partition's
    /// workspace and the reviewers publish it; who reads what is published is the rule's
    /// `read` — the owner, the claims naming it — and neither role reads it by being one.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func reviewOnOwnerAndClaimsPartitions(_ backend: TestBackend) async throws {
        let yaml = """
            collections:
              drafts: { partitioned: true, read: owner, review: { editors: editor, reviewers: reviewer } }
              notes: { partitioned: true, read: claims, review: { editors: editor, reviewers: reviewer } }
            """
        try await withRules(backend, yaml) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let reviewer = try await fixture.token("rev", roles: ["reviewer"])
            let alice = try await fixture.token("alice")
            let bob = try await fixture.token("bob")
            let noteReader = try await AccessClaims(subject: "carol", expires: Date().addingTimeInterval(600), write: [], read: ["notes/alice"])
                .signed(secret: ReviewTests.secret)
            for (collection, reader, other) in [("drafts/alice", alice, bob), ("notes/alice", noteReader, alice)] {
                let path = CollectionPath(collection)!.urlPath
                // The owner (or a claim) does not make an editor; the editor role writes any partition.
                #expect(try await Self.push(fixture, collection, "r1", token: reader) == 403)
                #expect(try await Self.push(fixture, collection, "r1", token: editor) == 200)
                #expect(try await fixture.send("GET", path, token: reader).status == 404, "nothing published yet")
                #expect(try await fixture.send("GET", "\(path)/review", token: editor).text.contains(#""id":"r1""#))
                try await fixture.step("request", collection, token: editor)
                try await fixture.step("approve", collection, token: reviewer)
                let read = try await fixture.send("GET", path, token: reader)
                #expect(read.status == 200 && read.text.contains(#""id":"r1""#), "\(collection): \(read.text)")
                for outsider in [other, editor, reviewer] {
                    #expect(try await fixture.send("GET", path, token: outsider).status == 404, "\(collection)")
                }
            }
        }
    }

    /// `GET /v1/collections` with a preview token lists each reviewed collection's workspace
    /// under the collection's name (what `GET {base}` answers that token), `private,
    /// no-store`; every other caller is listed what is published. Also where everything is
    /// public.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func theCollectionListOfAPreviewToken(_ backend: TestBackend) async throws {
        for yaml in [Self.rules(selfApprove: false), "collections:\n  catalogue: { read: public, review: { editors: editor, reviewers: reviewer } }\n"] {
            try await withRules(backend, yaml) { fixture in
                let device = try await fixture.token("tablet", preview: true)
                let ordinary = try await fixture.token("someone")
                func entry(as token: String?) async throws -> (entry: JSONValue, cacheControl: String?) {
                    let answer = try await fixture.send("GET", "/v1/collections", token: token)
                    #expect(answer.status == 200)
                    #expect(!answer.text.contains(ReviewPaths.reservedPrefix), "\(answer.text)")
                    guard case .array(let list)? = try JSONReader(bytes: answer.body).readValue()["collections"],
                          let entry = list.first(where: { $0["name"] == .string("catalogue") })
                    else { throw RawHTTPClient.Failure(description: "no catalogue in \(answer.text)") }
                    return (entry, answer.header("Cache-Control"))
                }
                // The workspace has tokens of its own (another epoch) from the start.
                let before = try await entry(as: nil)
                let workspace = try await entry(as: device)
                #expect(workspace.entry["count"] == .number("100") && workspace.entry["token"] != before.entry["token"])
                #expect(try await fixture.send("PUT", "/v1/collections/catalogue/records/x1", token: TestServer.writeToken, body: #"{"id":"x1"}"#).status == 200)

                let previewed = try await entry(as: device)
                #expect(previewed.entry["count"] == .number("101") && previewed.cacheControl == "private, no-store")
                let body = try await fixture.send("GET", "/v1/collections/catalogue", token: device)
                #expect(previewed.entry["token"] == Self.etag(body).map(JSONValue.string), "\(previewed.entry)")
                #expect(previewed.entry["checksum"] == (try JSONReader(bytes: body.decodedBody()).readValue()["checksum"]))
                for caller in [nil, ordinary] {
                    let published = try await entry(as: caller)
                    #expect(published.entry == before.entry, "\(published.entry)")
                }
            }
        }
    }

    /// PROTOCOL §5.2's `Cache-Control`: `no-cache`, and `private, no-store` for a verified
    /// token on a server with anything private, or a preview token; a token that does not
    /// verify is no error here — it is listed what anyone may read, `no-cache`.
    @Test(.timeLimit(.minutes(3)))
    func theCollectionListsCacheControl() async throws {
        let hasPrivate = Self.rules(selfApprove: false)  // drafts: read: owner
        let allPublic = "collections:\n  catalogue: { read: public, write: admin }\n"
        for (yaml, tokenAnswer) in [(hasPrivate, "private, no-store"), (allPublic, "no-cache")] {
            try await withRules(.sqlite, yaml) { fixture in
                let user = try await fixture.token("someone")
                let forged = PushEndpointTests.handSigned(#"{"sub":"x","exp":\#(Int(Date().timeIntervalSince1970) + 600)}"#, secret: "another secret")
                for (token, expected) in [(nil, "no-cache"), (forged, "no-cache"), (user, tokenAnswer), (TestServer.writeToken, tokenAnswer)] {
                    let answer = try await fixture.send("GET", "/v1/collections", token: token)
                    #expect(answer.status == 200 && answer.header("Cache-Control") == expected, "\(yaml) \(token ?? "none"): \(answer.header("Cache-Control") ?? "none")")
                    let head = try await fixture.send("HEAD", "/v1/collections", token: token)
                    #expect(head.header("Cache-Control") == expected)
                }
            }
        }
    }
}
