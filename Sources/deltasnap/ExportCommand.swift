import ArgumentParser
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapStoreLocation

struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Print a collection's visible records as NDJSON sorted by id (canonical bytes).",
        discussion: "The client's `dump` prints the same bytes for the same state."
    )

    @Option(name: .long, help: "Path of the SQLite store, or a PostgreSQL URL (postgres://user@host:port/db).")
    var db: String

    @Option(name: .long, help: "Collection name.")
    var collection: String

    func run() async throws {
        try await reportingErrors {
            let output = StandardOutput()
            try await StoreLocation.withStore(db, readOnly: true) { store in
                try await store.export(collection) { output.write($0) }
            }
        }
    }
}
