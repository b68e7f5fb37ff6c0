import ArgumentParser
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTrust
import Foundation

/// `deltasnap attachment …`: a data owner's blobs.
struct AttachmentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment",
        abstract: "Store files that records refer to (attachments), or get one a replica's records refer to.",
        subcommands: [AttachmentAddCommand.self, AttachmentGetCommand.self]
    )
}

/// `deltasnap attachment add --db DB --collection NAME[/KEY] FILE [--type MEDIA]`
struct AttachmentAddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Store a file as an attachment and print the reference to put in a record.",
        discussion: """
            Each file is stored once per store, named by the SHA-256 of its bytes, after both are \
            checked. The line printed for each is its reference, e.g.

              {"$attachment":"9f86d0…0a08","size":4,"type":"image/jpeg"}

            Put it as the value of a record's member (or in an array there) and import the \
            record into the same collection: the record's checksum, the collection's digest \
            and a signed index then cover the file's hash (docs/PROTOCOL.md, "Attachments"). \
            --type defaults to the media type of the file's extension \
            (application/octet-stream when unknown).
            """
    )

    @Option(name: .long, help: "The store: an SQLite path or postgres://user@host:port/db.")
    var db: String

    @Option(name: .long, help: "The collection (or NAME/KEY partition) whose records will refer to the file.")
    var collection: String

    @Option(name: .long, help: "The media type, e.g. image/jpeg (default: from the file's extension).")
    var type: String?

    @Argument(help: "The files to store (one reference printed per file, in order).")
    var files: [String]

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("give at least one FILE") }
        guard CollectionPath(collection) != nil else { throw ValidationError(InvalidCollectionName(name: collection).description) }
        if let type, (try? AttachmentReference(sha256: String(repeating: "0", count: 64), size: 0, type: type)) == nil {
            throw ValidationError("--type \(type) is not a media type such as image/jpeg")
        }
    }

    func run() async throws {
        try await reportingErrors {
            try await StoreLocation.withStore(db) { store in
                for file in files {
                    let (sha256, size) = try Self.digest(of: file)
                    let reference = try AttachmentReference(sha256: sha256, size: size, type: type ?? MediaType.guess(for: file))
                    let input = try ChunkSources.file(at: file)
                    try await store.storeAttachment(reference) { try input() }
                    // Uploaded into --collection: its writers may name it in a push (§12.2).
                    try await store.noteAttachmentUpload(sha256, into: collection)
                    print(reference)
                }
            }
        }
    }

    /// The SHA-256 (lowercase hex) and size of the file at `path`, read in chunks.
    static func digest(of path: String) throws -> (String, UInt64) {
        let input = try ChunkSources.file(at: path)
        // No hash to check against: the verifier only hashes, with no size to reach.
        var hasher = AttachmentVerifier(sha256: "", size: .max)
        while let chunk = try input() { try hasher.consume(chunk) }
        return (hasher.digest, hasher.received)
    }
}

/// `deltasnap attachment get --url URL --replica FILE [--token JWT] HASH --out PATH`
struct AttachmentGetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Write a verified copy of an attachment a replica's records refer to.",
        discussion: """
            From the replica's own copy when it has one (or the bundled one), else downloaded \
            from the collection URL and checked against the size and SHA-256 its record states \
            before anything is written to --out. A cut download keeps what arrived (the \
            replica's partial/ directory) and goes on with Range: bytes=N- (and If-Range) at \
            once while each try brings more, and from there on the next run. Exit 1 when no \
            record of the replica refers to HASH or the bytes are not the attachment's; 4 when \
            the server cannot be reached or the download was cut without progress (try later).
            """
    )

    @Option(name: .long, help: "The collection URL the replica syncs with, e.g. http://127.0.0.1:8080/v1/collections/notes.")
    var url: String

    @Option(name: .long, help: "Path of the local replica.")
    var replica: String

    @Option(name: .long, help: "A bearer token, for a private collection.")
    var token: String?

    @Option(name: .long, help: "Where to write the file.")
    var out: String

    @Argument(help: "The attachment's SHA-256 (64 lowercase hex digits).")
    var hash: String

    func validate() throws {
        guard URL(string: url)?.scheme?.hasPrefix("http") == true else { throw ValidationError("--url must be an http(s) URL") }
        guard AttachmentReference.isSHA256(hash) else { throw ValidationError("\(hash) is not a SHA-256 (64 lowercase hex digits)") }
        guard FileManager.default.fileExists(atPath: replica) else { throw ValidationError("--replica \(replica) does not exist") }
    }

    func run() async throws {
        let code = try await reportingErrors { () async throws -> ExitCode? in
            let collectionURL = URL(string: url)!
            let replica = try DeltaSnapReplica(
                path: self.replica, collection: collectionURL.lastPathComponent, url: collectionURL,
                accessToken: token ?? ProcessInfo.processInfo.environment["DELTASNAP_TOKEN"])
            guard let reference = try await replica.attachmentReference(hash) else {
                throw PullFailure(message: "no record of \(self.replica) refers to attachment \(hash)")
            }
            let file: URL
            do {
                file = try await replica.attachment(reference)
            } catch AttachmentError.failed(let why) {
                printError("deltasnap: attachment \(hash): \(why); try again later")
                return Exit.unavailable
            }
            try? FileManager.default.removeItem(atPath: out)
            try FileManager.default.copyItem(atPath: file.path, toPath: out)
            print("\(out): \(reference.size) bytes, \(reference.type), sha256 \(hash)")
            return nil
        }
        if let code { throw code }
    }
}

/// `deltasnap attachments --replica FILE [--collection NAME/KEY]`
struct AttachmentsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachments",
        abstract: "List the attachments a replica knows of: HASH SIZE STATE, one a line.",
        discussion: """
            STATE is pending-upload (attached here, uploaded before the write that needs it is \
            pushed), cached (here, proven) or remote (a record refers to it; not here: lazy, \
            evicted or postponed). Prints nothing when there are none.
            """
    )

    @Option(name: .long, help: "Path of the local replica.")
    var replica: String

    @Option(name: .long, help: "In a view's replica: the collection or partition NAME/KEY to list.")
    var collection: String?

    func validate() throws {
        if let collection, !CollectionPath.isValid(collection) { throw ValidationError(InvalidCollectionName(name: collection).description) }
        guard FileManager.default.fileExists(atPath: replica) else { throw ValidationError("--replica \(replica) does not exist") }
    }

    func run() async throws {
        try await reportingErrors {
            let local = try collection.map { try LocalReplica(path: replica, collection: $0) } ?? LocalReplica(path: replica)
            let lines = try local.attachmentStatuses().map { "\($0.sha256) \($0.size) \($0.state)" }
            if !lines.isEmpty { print(lines.joined(separator: "\n")) }
        }
    }
}

/// The media types of common file extensions, for `attachment add` without `--type`.
enum MediaType {
    static let byExtension: [String: String] = [
        "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp", "heic": "image/heic",
        "svg": "image/svg+xml", "pdf": "application/pdf", "txt": "text/plain", "md": "text/markdown", "html": "text/html",
        "json": "application/json", "csv": "text/csv", "mp3": "audio/mpeg", "m4a": "audio/mp4", "mp4": "video/mp4", "mov": "video/quicktime",
        "zip": "application/zip",
    ]

    static func guess(for path: String) -> String {
        byExtension[URL(fileURLWithPath: path).pathExtension.lowercased()] ?? "application/octet-stream"
    }
}
