import DeltaSnapTestSupport
import Foundation
import Testing

/// `deltasnap review …`, `deltasnap token --role` and `deltasnap import` into a reviewed
/// collection, as an operator drives them against `deltasnap serve --rules`.
@Suite struct ReviewCommandTests {
    @Test(.timeLimit(.minutes(2)))
    func anImportWaitsForReviewAndTheCLIWalksItToPublication() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let rules = dir.file("rules.yaml")
        try "collections:\n  catalogue: { read: public, review: { editors: editor, reviewers: reviewer } }\n".write(toFile: rules, atomically: true, encoding: .utf8)
        let seeded = try await CLI.run(["import", "--db", db, "--collection", "catalogue", "--quiet", "-"], stdin: #"{"id":"a","price":1}"# + "\n" + #"{"id":"b","price":2}"# + "\n")
        #expect(seeded.status == 0, "\(seeded.stderr)")
        let server = try await ServeProcess.start(["--db", db, "--jwt-secret", "cli-secret", "--rules", rules, "--write-token", "admin"])
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"
        func token(_ subject: String, _ role: String) async throws -> String {
            let minted = try await CLI.run(["token", "--secret", "cli-secret", "--subject", subject, "--role", role])
            #expect(minted.status == 0, "\(minted.stderr)")
            return minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let editor = try await token("ed", "editor")
        let reviewer = try await token("rev", "reviewer")
        let before = try await offPool { try RawHTTPClient(port: server.port).request("GET", "/v1/collections/catalogue") }

        // The data owner's import goes to the workspace: readers see nothing yet.
        let imported = try await CLI.run(["import", "--db", db, "--collection", "catalogue", "--quiet", "-"], stdin: #"{"id":"b","price":3}"# + "\n" + #"{"id":"c","price":4}"# + "\n")
        #expect(imported.status == 0 && imported.stdout.contains("its workspace, for review"), "\(imported.stdout)\(imported.stderr)")
        let meanwhile = try await offPool { try RawHTTPClient(port: server.port).request("GET", "/v1/collections/catalogue") }
        #expect(meanwhile.header("ETag") == before.header("ETag"))

        let target = ["--url", url, "--collection", "catalogue"]
        let shown = try await CLI.run(["review", "show", "--token", reviewer] + target)
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stdout == "~ b price: 2 → 3\n+ c\n", "\(shown.stdout)")
        let refused = try await CLI.run(["review", "request", "--token", reviewer] + target)
        #expect(refused.status == 1 && refused.stderr.contains("403"), "\(refused.stderr)")
        let requested = try await CLI.run(["review", "request", "--token", editor, "--comment", "new prices"] + target)
        #expect(requested.status == 0 && requested.stdout.contains("requested review of 2 changes"), "\(requested.stdout)\(requested.stderr)")
        let declined = try await CLI.run(["review", "decline", "--token", reviewer, "--comment", "check c"] + target)
        #expect(declined.status == 0, "\(declined.stderr)")
        _ = try await CLI.run(["review", "request", "--token", editor] + target)
        let approved = try await CLI.run(["review", "approve", "--token", reviewer] + target)
        #expect(approved.status == 0 && approved.stdout.contains("published version 2"), "\(approved.stdout)\(approved.stderr)")
        let after = try await offPool { try RawHTTPClient(port: server.port).request("GET", "/v1/collections/catalogue") }
        #expect(after.text.contains(#"{"id":"c","price":4}"#))

        let log = try await CLI.run(["review", "log", "--token", editor] + target)
        let steps = log.stdout.split(separator: "\n").map { $0.split(separator: " ")[2] }
        #expect(steps == ["request", "decline", "request", "approve"], "\(log.stdout)")
        #expect(log.stdout.contains("— check c"))
        let rolledBack = try await CLI.run(["review", "rollback", "--token", reviewer, "--version", "1", "--id", "c"] + target)
        #expect(rolledBack.status == 0 && rolledBack.stdout.contains("published version 3"), "\(rolledBack.stdout)\(rolledBack.stderr)")
        let final = try await offPool { try RawHTTPClient(port: server.port).request("GET", "/v1/collections/catalogue") }
        #expect(!final.text.contains(#""id":"c""#) && final.text.contains(#"{"id":"b","price":3}"#), "only c went back: \(final.text)")
    }
}
