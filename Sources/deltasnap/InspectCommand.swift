import ArgumentParser
import DeltaSnapClient
import DeltaSnapCore

struct InspectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Verify a snapshot or replica file record by record and print its collection, token, count and checksum.",
        discussion: "A corrupt or truncated file gives a one-line error and exit code 1."
    )

    @Argument(help: "A .snapshot (or .replica) file written by `deltasnap bake`.")
    var file: String

    func run() async throws {
        try await reportingErrors {
            if BundledReplica.isReplica(file) { return try inspectReplica() }
            // A replica read in place has no file of its own yet: its data is the bundle's.
            if BundledReplica.isReadInPlace(file) {
                throw FileError(path: file, reason: "does not exist yet: this replica is still read in place from its bundled .replica (inspect that file)")
            }
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

extension InspectCommand {
    private func inspectReplica() throws {
        let summary: BundledReplica.Summary
        do {
            summary = try BundledReplica.inspect(file)
        } catch {
            throw InspectFailure(file: file, reason: "\(error)")
        }
        guard summary.verified else { throw InspectFailure(file: file, reason: "its records do not match its stored count and checksum") }
        print("collection: \(summary.collection)")
        print("token: \(summary.token)")
        print("lastModified: \(summary.lastModified ?? "")")
        print("count: \(summary.count)")
        print("checksum: \(summary.checksum) (verified)")
        print("format: replica")
        if let server = summary.server { print("server: \(server)") }
    }
}

struct InspectFailure: Error, CustomStringConvertible {
    var file: String
    var reason: String
    var description: String { "\(file): not a valid snapshot: \(reason)" }
}
