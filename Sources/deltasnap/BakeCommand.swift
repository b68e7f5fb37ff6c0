import ArgumentParser
import DeltaSnapStore

struct BakeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bake",
        abstract: "Write DIR/NAME.snapshot, the gzip-compressed full body an app bundles, and DIR/manifest.json.",
        discussion: "Deterministic: the same store state gives byte-identical files."
    )

    @Option(name: .long, help: "Path of the SQLite store.")
    var db: String

    @Option(name: .long, help: "Collection name.")
    var collection: String

    @Option(name: .long, help: "Output directory (created if missing).")
    var out: String = "Snapshots"

    func run() async throws {
        try await reportingErrors {
            let store = try Store(path: db, readOnly: true)
            let started = ContinuousClock.now
            let entry = try Baker.bake(store: store, collection: collection, into: out)
            print("\(out)/\(collection).snapshot: \(entry.count) records, token \(entry.token), checksum \(entry.checksum), \(entry.bytes) bytes, sha256 \(entry.sha256) [\(rate(entry.count, since: started))]")
        }
    }
}
