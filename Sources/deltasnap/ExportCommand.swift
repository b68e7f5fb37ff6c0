import ArgumentParser
import DeltaSnapStore

struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Print a collection's visible records as NDJSON sorted by id (canonical bytes).",
        discussion: "The client's `dump` prints the same bytes for the same state."
    )

    @Option(name: .long, help: "Path of the SQLite store.")
    var db: String

    @Option(name: .long, help: "Collection name.")
    var collection: String

    func run() async throws {
        try await reportingErrors {
            let store = try Store(path: db, readOnly: true)
            let output = StandardOutput()
            try Exporter.export(store: store, collection: collection) { output.write($0) }
        }
    }
}
