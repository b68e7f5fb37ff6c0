import ArgumentParser
import DeltaSnapCore

struct InspectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Verify a snapshot file record by record and print its collection, token, count and checksum.",
        discussion: "A corrupt or truncated file gives a one-line error and exit code 1."
    )

    @Argument(help: "A .snapshot file written by `deltasnap bake`.")
    var file: String

    func run() async throws {
        try await reportingErrors {
            let header: BodyHeader
            do {
                header = try Snapshot.read(path: file)
            } catch let error as FileError {
                throw error
            } catch {
                throw InspectFailure(file: file, reason: "\(error)")
            }
            print("collection: \(header.collection)")
            print("token: \(header.token)")
            print("lastModified: \(header.lastModified)")
            print("count: \(header.count)")
            print("checksum: \(header.checksum) (verified)")
        }
    }
}

struct InspectFailure: Error, CustomStringConvertible {
    var file: String
    var reason: String
    var description: String { "\(file): not a valid snapshot: \(reason)" }
}
