import ArgumentParser
import DeltaSnapClient
import DeltaSnapCore
import Foundation

struct RevertCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revert",
        abstract: "Queue a write that puts a record back to a value from its history.",
        discussion: """
            VERSION is the `version` of a line `deltasnap history` prints: the version that \
            wrote the value to go back to. The revert is an ordinary local write, visible in \
            the replica at once and pushed by the next `deltasnap sync`; the value it replaces \
            goes to history in turn, so a revert can be reverted.

            Prints: queued SEQ put ID (the value of version VERSION)

            Exit codes: 0 queued; 1 error (no such version in the record's history, the \
            server refused, a replica of another collection…); 2 usage.
            """
    )

    @Option(name: .long, help: "The collection URL, e.g. http://127.0.0.1:8080/v1/collections/notes.")
    var url: String

    @Option(name: .long, help: "Path of the local replica the write is queued in.")
    var replica: String

    @Option(name: .long, help: "A bearer token, for a private collection.")
    var token: String?

    @Option(name: .long, help: ArgumentHelp("The version whose value to restore (a history entry's `version`).", valueName: "version"))
    var to: UInt64

    @Argument(help: "The record id.")
    var id: String

    func validate() throws {
        guard URL(string: url)?.scheme?.hasPrefix("http") == true else { throw ValidationError("--url must be an http(s) URL") }
    }

    func run() async throws {
        try await reportingErrors {
            let collectionURL = URL(string: url)!
            // revert takes no bundle: the history comes from the server, the write goes to the replica's own file.
            try refuseReadInPlace(self.replica, snapshot: nil)
            let replica = try DeltaSnapReplica(
                path: self.replica, collection: collectionURL.lastPathComponent, url: collectionURL,
                accessToken: token ?? ProcessInfo.processInfo.environment["DELTASNAP_TOKEN"])
            let seq = try await replica.revert(id, to: to)
            print("queued \(seq) put \(id) (the value of version \(to))")
        }
    }
}
