import ArgumentParser
import DeltaSnapClient
import DeltaSnapCore
import Foundation

/// `deltasnap review …`: review before publish from a terminal (docs/PROTOCOL.md §13).
struct ReviewCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "review",
        abstract: "See, request, approve, decline or roll back a reviewed collection's change.",
        discussion: """
            A collection marked `review` in the rules file publishes nothing by itself: its \
            editors' writes go to a workspace, an editor requests a review, and a reviewer \
            approves (publishing exactly what was requested, as one version), declines, or \
            rolls back to an earlier published version. Every step lands in an audit log.

            Every subcommand takes --url (the server, e.g. http://127.0.0.1:8080), --token (a \
            JWT with the role the rule names, or the admin token; else $DELTASNAP_TOKEN) and \
            --collection NAME or NAME/KEY.

            Exit codes: 0 done; 1 error (the server refused: its code and message are printed); 2 usage.
            """,
        subcommands: [Show.self, Request.self, Approve.self, Decline.self, Rollback.self, Log.self]
    )

    struct Target: ParsableArguments {
        @Option(name: .long, help: "The server's base URL, e.g. http://127.0.0.1:8080.")
        var url: String

        @Option(name: .long, help: "A bearer token: an editor's or reviewer's JWT, or the admin token (default: $DELTASNAP_TOKEN).")
        var token: String?

        @Option(name: .long, help: "The reviewed collection, NAME or NAME/KEY.")
        var collection: String

        func validate() throws {
            guard URL(string: url)?.scheme?.hasPrefix("http") == true else { throw ValidationError("--url must be an http(s) URL, e.g. http://127.0.0.1:8080") }
            guard CollectionPath(collection) != nil else { throw ValidationError("--collection must be NAME or NAME/KEY: \(collection)") }
        }

        /// `{base}/review` + `suffix`, with `query`.
        func endpoint(_ suffix: String, query: [URLQueryItem] = []) throws -> URL {
            var components = URLComponents(string: url.hasSuffix("/") ? String(url.dropLast()) : url)!
            components.path += CollectionPath(collection)!.urlPath + "/review" + suffix
            if !query.isEmpty { components.queryItems = query }
            guard let endpoint = components.url else { throw ValidationError("cannot build a URL from --url \(url)") }
            return endpoint
        }

        /// Sends one request; the answer's JSON, or throws with the server's code and message.
        func send(_ method: String, _ endpoint: URL, body: JSONValue? = nil) async throws -> JSONValue {
            var headers = ["Accept": "application/json"]
            if let token = token ?? ProcessInfo.processInfo.environment["DELTASNAP_TOKEN"] { headers["Authorization"] = "Bearer \(token)" }
            var bytes: [UInt8]?
            if let body {
                headers["Content-Type"] = "application/json"
                bytes = Array(CanonicalJSON.string(body).utf8)
            }
            let response: SyncResponse
            do {
                response = try await URLSessionTransport().fetch(SyncRequest(url: endpoint, method: method, headers: headers, body: bytes, timeout: .seconds(120)))
            } catch {
                throw ReviewCommandError("no answer from \(url): \(DeltaSnapReplica.describe(error))")
            }
            defer { response.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
            let data = response.bodyFile.flatMap { FileManager.default.contents(atPath: $0.path) }.map(Array.init) ?? []
            let value = try? JSONReader(bytes: data).readValue()
            guard response.status == 200, let value else {
                let code: String = if case .string(let text)? = value?["error"] { text } else { "http_\(response.status)" }
                let message: String = if case .string(let text)? = value?["message"] { text } else { String(decoding: data.prefix(300), as: UTF8.self) }
                throw ReviewCommandError("\(response.status) \(code): \(message)")
            }
            return value
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the change under review, one line per changed record.",
            discussion: """
                The frozen request when one waits, else the workspace, against what is published: \
                `+ ID` (added), `- ID` (removed), `~ ID member: OLD → NEW` (one line per changed \
                member; a member absent on one side prints as (absent)). Values are canonical JSON. \
                A line on standard error says whether a request waits.
                """)
        @OptionGroup var target: Target

        func run() async throws {
            try await reportingErrors {
                var after: String?
                var first = true
                repeat {
                    var query = [URLQueryItem(name: "limit", value: "1000")]
                    if let after { query.append(URLQueryItem(name: "after", value: after)) }
                    let page = try await target.send("GET", try target.endpoint("", query: query))
                    if first {
                        printError(Self.status(page["pending"]))
                        first = false
                    }
                    if case .array(let changes)? = page["changes"] { for change in changes { for line in Self.lines(change) { print(line) } } }
                    after = if case .string(let next)? = page["next"] { next } else { nil }
                } while after != nil
            }
        }

        static func status(_ pending: JSONValue?) -> String {
            guard let pending, case .string(let by)? = pending["by"] else { return "no review requested: the workspace's changes" }
            return "review requested by \(by) (log \(text(pending["sequence"]))): the requested changes"
        }

        static func lines(_ change: JSONValue) -> [String] {
            guard case .string(let id)? = change["id"], case .string(let kind)? = change["change"] else { return [] }
            switch kind {
            case "added": return ["+ \(id)"]
            case "removed": return ["- \(id)"]
            default:
                guard case .array(let members)? = change["members"] else { return ["~ \(id)"] }
                return members.map { member in
                    "~ \(id) \(text(member["member"])): \(member["old"].map(CanonicalJSON.string) ?? "(absent)") → \(member["new"].map(CanonicalJSON.string) ?? "(absent)")"
                }
            }
        }
    }

    struct Request: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Freeze the workspace as the change a reviewer decides on (editors).")
        @OptionGroup var target: Target
        @Option(name: .long, help: "What the change is, for the reviewer.") var comment: String?

        func run() async throws {
            try await reportingErrors {
                let answer = try await target.send("POST", try target.endpoint("/request"), body: commentBody(comment))
                let changes = text(answer["entry"]?["changes"])
                print("requested review of \(changes) change\(changes == "1" ? "" : "s") (log \(text(answer["entry"]?["sequence"])))")
            }
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Publish exactly the requested change as one new version (reviewers).")
        @OptionGroup var target: Target
        @Option(name: .long, help: "A note for the audit log.") var comment: String?

        func run() async throws {
            try await reportingErrors {
                let answer = try await target.send("POST", try target.endpoint("/approve"), body: commentBody(comment))
                print(published("approved", answer))
            }
        }
    }

    struct Decline: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send the requested change back; the workspace stays (reviewers).")
        @OptionGroup var target: Target
        @Option(name: .long, help: "Why (required): the editor reads it in the log.") var comment: String

        func run() async throws {
            try await reportingErrors {
                let answer = try await target.send("POST", try target.endpoint("/decline"), body: commentBody(comment))
                print("declined (log \(text(answer["entry"]?["sequence"])))")
            }
        }
    }

    struct Rollback: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish a new version equal to an earlier published one, or restore chosen records only (reviewers).")
        @OptionGroup var target: Target
        @Option(name: .long, help: "The published version to go back to (a `version` in `review log`).") var version: UInt64
        @Option(name: .long, help: "Restore only this record (repeatable); default: every record.") var id: [String] = []
        @Option(name: .long, help: "A note for the audit log.") var comment: String?

        func run() async throws {
            try await reportingErrors {
                var members: [JSONMember] = [JSONMember("version", .number(String(version)))]
                if let comment { members.append(JSONMember("comment", .string(comment))) }
                if !id.isEmpty { members.append(JSONMember("ids", .array(id.map(JSONValue.string)))) }
                members.sort { $0.key.utf8Precedes($1.key) }
                let answer = try await target.send("POST", try target.endpoint("/rollback"), body: .object(members))
                print(published("rolled back to version \(version)", answer))
            }
        }
    }

    struct Log: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the audit log: SEQ TIME STEP BY [version V] [changes N] [comment], oldest first.")
        @OptionGroup var target: Target

        func run() async throws {
            try await reportingErrors {
                let answer = try await target.send("GET", try target.endpoint("/log"))
                guard case .array(let entries)? = answer["entries"] else { return }
                for entry in entries {
                    let at = Date(timeIntervalSince1970: TimeInterval(Int64(text(entry["at"])) ?? 0))
                    var line = "\(text(entry["sequence"])) \(ISO8601DateFormatter().string(from: at)) \(text(entry["step"])) \(text(entry["by"]))"
                    if let version = entry["version"] { line += " version \(CanonicalJSON.string(version))" }
                    line += " changes \(text(entry["changes"]))"
                    if case .string(let comment)? = entry["comment"] { line += " — \(comment)" }
                    print(line)
                }
            }
        }
    }
}

private func commentBody(_ comment: String?) -> JSONValue {
    .object(comment.map { [JSONMember("comment", .string($0))] } ?? [])
}

private func text(_ value: JSONValue?) -> String {
    switch value {
    case .string(let text)?: text
    case .number(let text)?: text
    case .some(let other): CanonicalJSON.string(other)
    case nil: "?"
    }
}

/// `approved: published version 8 (token E.8), 1003 changes`, or that nothing changed.
private func published(_ what: String, _ answer: JSONValue) -> String {
    guard let version = answer["entry"]?["version"] else { return "\(what): nothing changed (log \(text(answer["entry"]?["sequence"])))" }
    let changes = text(answer["entry"]?["changes"])
    return "\(what): published version \(text(version)) (token \(text(answer["token"]))), \(changes) change\(changes == "1" ? "" : "s")"
}

struct ReviewCommandError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
