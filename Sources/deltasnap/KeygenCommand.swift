import ArgumentParser
import DeltaSnapTrust

struct KeygenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Write an Ed25519 key pair that signs the index: DIR/signing.key (secret) and DIR/signing.pub.",
        discussion: """
            Give signing.key to `serve --signing-key` and `bake --signing-key`; ship \
            signing.pub in the app (`pull --trusted-key`, `TrustedKey(contentsOf:)`). To rotate: \
            make a new pair, release the app trusting both public keys, serve with both \
            --signing-key options, then drop the old key. Existing files are never overwritten.
            """
    )

    @Option(name: .long, help: "Directory to write signing.key and signing.pub into (created if missing).")
    var out: String

    func run() async throws {
        try await reportingErrors {
            let key = IndexSigningKey.generate()
            try key.write(toDirectory: out)
            print("\(out)/\(IndexSigningKey.privateFileName): private key (keep it secret)")
            print("\(out)/\(IndexSigningKey.publicFileName): public key, id \(key.publicKey.id) (pin it in the app)")
        }
    }
}
