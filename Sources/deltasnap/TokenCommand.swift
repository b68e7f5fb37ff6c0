import ArgumentParser
import DeltaSnapServer
import Foundation

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Mint a per-user access token (an HS256 JWT) for development and tests.",
        discussion: """
            In production the app's own auth service signs these; `serve --jwt-secret S` checks \
            them. Claims: sub (the user), exp, the collections the holder may write and \
            read ("*" means all), the roles a reviewed collection's rule names (--role) and \
            preview (--preview: a preview device, which reads reviewed collections' workspaces). \
            Prints the token on one line.
            """
    )

    @Option(name: .long, help: "The shared HS256 secret (the one given to `serve --jwt-secret`).")
    var secret: String

    @Option(name: .long, help: "The user the token is for (its `sub` claim).")
    var subject: String

    @Option(name: .long, help: "Collections the holder may write, comma-separated.")
    var write: String = ""

    @Option(name: .long, help: "Collections the holder may read when private, comma-separated.")
    var read: String = ""

    @Option(name: .long, help: "A role for reviewed collections, e.g. editor or reviewer (repeatable).")
    var role: [String] = []

    @Flag(name: .long, help: "A preview device's token: it reads reviewed collections' workspaces as if published.")
    var preview = false

    @Option(name: .long, help: "Seconds until the token expires.")
    var expiresIn: Int = 3600

    func validate() throws {
        guard !secret.isEmpty else { throw ValidationError("--secret must not be empty") }
        guard !subject.isEmpty else { throw ValidationError("--subject must not be empty") }
        guard expiresIn != 0 else { throw ValidationError("--expires-in must not be 0") }
    }

    func run() async throws {
        try await reportingErrors {
            let claims = AccessClaims(
                subject: subject, expires: Date().addingTimeInterval(TimeInterval(expiresIn)),
                write: Self.list(write), read: Self.list(read), roles: role.flatMap(Self.list), preview: preview)
            print(try await claims.signed(secret: secret))
        }
    }

    static func list(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
