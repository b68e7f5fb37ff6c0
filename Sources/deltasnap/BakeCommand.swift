import ArgumentParser
import DeltaSnapClient
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTrust
import Foundation

struct BakeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bake",
        abstract: "Write DIR/NAME.snapshot, the gzip-compressed full body an app bundles, and DIR/manifest.json.",
        discussion: """
            Deterministic: the same store state gives byte-identical files. With --replica, \
            also DIR/NAME.replica: the client's SQLite replica, ready to open in place at an \
            app's first start (no parsing, whatever the size); bundle either file. With \
            --signing-key, also DIR/NAME.index: the signed index of the baked state, which a \
            client that pins the public key checks the bundled snapshot against. With \
            --attachments, also every file the baked records refer to, in DIR/attachments/HASH: \
            bundled next to the snapshot, they are used at first start without a download.
            """
    )

    @Option(name: .long, help: "The store: an SQLite path or postgres://user@host:port/db.")
    var db: String

    @Option(name: .long, help: "Collection name.")
    var collection: String

    @Option(name: .long, help: "Output directory (created if missing).")
    var out: String = "Snapshots"

    @Flag(name: .long, help: "Also write DIR/NAME.replica, a ready client replica (SQLite) built from the snapshot.")
    var replica = false

    @Flag(name: .long, help: "Also write every attachment the baked records refer to into DIR/attachments/HASH.")
    var attachments = false

    @Option(name: .long, help: "A private key from `deltasnap keygen`: also write DIR/NAME.index, signed (repeat while rotating keys).")
    var signingKey: [String] = []

    func run() async throws {
        try await reportingErrors {
            let keys = try signingKey.map { try IndexSigningKey(contentsOf: $0) }
            let started = ContinuousClock.now
            let attachments = self.attachments
            let (entry, files, index) = try await StoreLocation.withStore(db, readOnly: true) { store in
                let (entry, files) = try await store.bake(collection, into: out, withAttachments: attachments)
                let index = keys.isEmpty ? nil : try await store.writeSignedIndex(collection, keys: keys, into: out)
                return (entry, files, index)
            }
            print("\(out)/\(collection).snapshot: \(entry.count) records, token \(entry.token), checksum \(entry.checksum), \(entry.bytes) bytes, sha256 \(entry.sha256) [\(rate(entry.count, since: started))]")
            if attachments {
                print("\(out)/attachments: \(files.count) file\(files.count == 1 ? "" : "s"), \(files.reduce(0) { $0 + $1.size }) bytes")
            }
            if let index {
                print("\(out)/\(collection)\(SignedIndex.fileExtension): sequence \(index.sequence), digest \(index.entries[0].digest), signed by \(keys.map(\.publicKey.id).joined(separator: ", "))")
            }
            if replica {
                let replicaStarted = ContinuousClock.now
                let path = "\(out)/\(collection).replica"
                let summary = try BundledReplica.bake(snapshot: "\(out)/\(collection).snapshot", collection: collection, to: path)
                let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                print("\(path): \(summary.count) records, token \(summary.token), checksum \(summary.checksum), \(bytes) bytes [\(rate(summary.count, since: replicaStarted))]")
            }
        }
    }
}
