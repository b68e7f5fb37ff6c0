import ArgumentParser
import Crypto
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapStoreLocation
import Foundation

/// `deltasnap attachment …`: a data owner's blobs.
struct AttachmentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment",
        abstract: "Store files that records refer to (attachments).",
        subcommands: [AttachmentAddCommand.self]
    )
}

/// `deltasnap attachment add --db DB --collection NAME[/KEY] FILE [--type MEDIA]`
struct AttachmentAddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Store a file as an attachment and print the reference to put in a record.",
        discussion: """
            The file is stored once per store, named by the SHA-256 of its bytes, after both are \
            checked. The one line printed is the reference, e.g.

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

    @Argument(help: "The file to store.")
    var file: String

    func validate() throws {
        guard CollectionPath(collection) != nil else { throw ValidationError(InvalidCollectionName(name: collection).description) }
        if let type, (try? AttachmentReference(sha256: String(repeating: "0", count: 64), size: 0, type: type)) == nil {
            throw ValidationError("--type \(type) is not a media type such as image/jpeg")
        }
    }

    func run() async throws {
        try await reportingErrors {
            let (sha256, size) = try Self.digest(of: file)
            let reference = try AttachmentReference(sha256: sha256, size: size, type: type ?? MediaType.guess(for: file))
            try await StoreLocation.withStore(db) { store in
                let input = try ChunkSources.file(at: file)
                try await store.storeAttachment(reference) { try input() }
            }
            print(reference)
        }
    }

    /// The SHA-256 (lowercase hex) and size of the file at `path`, read in chunks.
    static func digest(of path: String) throws -> (String, UInt64) {
        let input = try ChunkSources.file(at: path)
        var hasher = SHA256()
        var size: UInt64 = 0
        while let chunk = try input() {
            hasher.update(data: chunk)
            size += UInt64(chunk.count)
        }
        return (hasher.finalize().map { String(format: "%02x", $0) }.joined(), size)
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
