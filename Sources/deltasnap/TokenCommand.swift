import ArgumentParser
import DeltaSnapCore
import DeltaSnapServer
import Foundation

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Mint a per-user access token (an HS256, RS256 or ES256 JWT) for development and tests.",
        discussion: """
            In production the app's own auth service signs these; `serve --jwt-secret S` checks \
            them. Claims: sub (the user), exp, the collections the holder may write and \
            read ("*" means all), the roles a reviewed collection's rule names (--role) and \
            preview (--preview: a preview device, which reads reviewed collections' workspaces). \
            Prints the token on one line. With --private-key FILE (an RSA or P-256 key in \
            PEM form) and --kid K instead of --secret, the token is RS256 or ES256 with that \
            kid, as an identity provider signs them: `serve --jwks-file` with the public half \
            of the key in a key set verifies it.
            """
    )

    @Option(name: .long, help: "The shared HS256 secret (the one given to `serve --jwt-secret`).")
    var secret: String?

    @Option(name: .long, help: ArgumentHelp("Sign with this private key (PEM: RSA for RS256, P-256 for ES256) instead of a secret.", valueName: "FILE"))
    var privateKey: String?

    @Option(name: .long, help: "The kid of --private-key's key in the key set that serve reads.")
    var kid: String?

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
        switch (secret, privateKey) {
        case (let secret?, nil): guard !secret.isEmpty else { throw ValidationError("--secret must not be empty") }
        case (nil, _?): guard let kid, !kid.isEmpty else { throw ValidationError("--private-key needs --kid") }
        default: throw ValidationError("give one of --secret and --private-key")
        }
        guard !subject.isEmpty else { throw ValidationError("--subject must not be empty") }
        guard expiresIn != 0 else { throw ValidationError("--expires-in must not be 0") }
    }

    func run() async throws {
        try await reportingErrors {
            let claims = AccessClaims(
                subject: subject, expires: Date().addingTimeInterval(TimeInterval(expiresIn)),
                write: Self.list(write), read: Self.list(read), roles: role.flatMap(Self.list), preview: preview)
            if let privateKey {
                guard let pem = FileManager.default.contents(atPath: privateKey) else { throw FileError(path: privateKey, reason: "cannot be read") }
                print(try await claims.signed(privateKeyPEM: String(decoding: pem, as: UTF8.self), kid: kid ?? ""))
            } else {
                print(try await claims.signed(secret: secret ?? ""))
            }
        }
    }

    static func list(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
