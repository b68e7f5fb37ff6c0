import ArgumentParser
import DeltaSnapCore
import DeltaSnapPostgres
import DeltaSnapStore

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
            if PostgresURL.matches(db) {
                let store = try await PostgresStore.connect(db)
                do {
                    guard try await store.head(of: collection) != nil else { throw StoreError.unknownCollection(collection) }
                    let output = StandardOutput()
                    var writer = NDJSONWriter { output.write($0) }
                    try await store.forEachVisibleRecord(in: collection) { try writer.append(line: $0) }
                    try writer.flush()
                } catch {
                    await store.close()
                    throw error
                }
                await store.close()
                return
            }
            let store = try Store(path: db, readOnly: true)
            let output = StandardOutput()
            try Exporter.export(store: store, collection: collection) { output.write($0) }
        }
    }
}
