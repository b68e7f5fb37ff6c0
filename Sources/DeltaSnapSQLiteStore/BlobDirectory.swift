import DeltaSnapCore
import DeltaSnapStore
import Foundation

/// A file being written, handed to the queue that syncs it: one task holds it at a time.
private struct FileToFinish: @unchecked Sendable {
    let file: FileHandle
    init(_ file: FileHandle) { self.file = file }
}

/// The SQLite store's attachments: a content-addressed directory beside the database file
/// (`deltasnap.sqlite.attachments/9f/9f86d0…`), one file per blob, the same bytes stored once.
///
/// A blob is written to `tmp/` while ``BlobVerifier`` checks it, synced, then renamed into
/// place: a reader never sees a partial or unverified file, a crash leaves at most a
/// temporary file (removed at the next opening), and two uploads of the same bytes race
/// harmlessly (the rename of identical content is atomic).
///
/// Files, not SQLite rows, because the directory serves a 1 GiB blob with `sendfile`-sized
/// reads and no transaction, and removing one is an `unlink`.
///
/// ```swift
/// let blobs = BlobDirectory(databasePath: "deltasnap.sqlite")
/// try await blobs.store(sha256: reference.sha256, size: reference.size, finishingOn: queue) { try await body.next() }
/// let file = blobs.path(of: reference.sha256)   // present once verified
/// ```
package final class BlobDirectory: Sendable {
    package let root: String

    /// The directory for the store at `databasePath`. Nothing is created until the first blob
    /// is stored: a store without attachments has no directory beside it.
    package init(databasePath: String) {
        root = databasePath + ".attachments"
    }

    /// Removes the leftovers of an interrupted write: once, by the store's writer, at its
    /// opening (no other write can be under way then).
    package func removeLeftovers() {
        let temporary = root + "/tmp"
        for leftover in (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? [] {
            try? FileManager.default.removeItem(atPath: temporary + "/" + leftover)
        }
    }

    /// Where the blob `sha256` lives (whether or not it is held).
    package func path(of sha256: String) -> String {
        precondition(AttachmentReference.isSHA256(sha256), "not a SHA-256: \(sha256)")
        return "\(root)/\(sha256.prefix(2))/\(sha256)"
    }

    /// Whether the blob is held (verified: only verified blobs are ever renamed into place).
    package func contains(_ sha256: String) -> Bool {
        AttachmentReference.isSHA256(sha256) && FileManager.default.fileExists(atPath: path(of: sha256))
    }

    /// The held blob's size, or nil.
    package func size(of sha256: String) -> UInt64? {
        guard contains(sha256), let attributes = try? FileManager.default.attributesOfItem(atPath: path(of: sha256)) else { return nil }
        return (attributes[.size] as? NSNumber)?.uint64Value
    }

    /// Reads chunks from `next` (nil: the end) into a new blob and keeps it only when they
    /// are exactly `size` bytes with SHA-256 `sha256`; throws ``StoreError/attachmentMismatch(_:)``
    /// otherwise, keeping nothing. Every byte is read and checked even when the blob is held
    /// already: a caller must not learn from a shortcut that someone else stored these bytes.
    /// The final `fsync` and rename run on `queue` (a 1 GiB flush must not hold a thread of
    /// the cooperative pool).
    package func store(sha256: String, size: UInt64, finishingOn queue: BlockingQueue, from next: () async throws -> [UInt8]?) async throws {
        guard AttachmentReference.isSHA256(sha256) else { throw StoreError.attachmentMismatch("\"\(sha256)\" is not a SHA-256 (64 lowercase hex digits)") }
        try FileManager.default.createDirectory(atPath: root + "/tmp", withIntermediateDirectories: true)
        let temporary = "\(root)/tmp/\(sha256).\(UInt64.random(in: 0...UInt64.max))"
        guard FileManager.default.createFile(atPath: temporary, contents: nil), let file = FileHandle(forWritingAtPath: temporary) else {
            throw StoreError.database("cannot create \(temporary)")
        }
        var verifier = BlobVerifier(sha256: sha256, size: size)
        do {
            while let chunk = try await next() {
                try verifier.consume(chunk)
                try file.write(contentsOf: chunk)
            }
            try verifier.finish()
            let destination = path(of: sha256)
            let handle = FileToFinish(file)
            try await queue.run {
                try handle.file.synchronize()
                try handle.file.close()
                try FileManager.default.createDirectory(atPath: String(destination.dropLast(sha256.count + 1)), withIntermediateDirectories: true)
                // rename(2) replaces atomically: a concurrent upload of the same bytes is harmless.
                guard rename(temporary, destination) == 0 else { throw StoreError.database("cannot move \(temporary) to \(destination): errno \(errno)") }
            }
        } catch {
            try? file.close()
            try? FileManager.default.removeItem(atPath: temporary)
            throw error
        }
    }

    /// Removes the blob (garbage collection); false when it was not held.
    @discardableResult
    package func remove(_ sha256: String) -> Bool {
        guard contains(sha256) else { return false }
        return (try? FileManager.default.removeItem(atPath: path(of: sha256))) != nil
    }

    /// Every blob held, by hash (for garbage collection and `bake --attachments`).
    package func hashes() -> [String] {
        let fan = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return fan.filter { $0.utf8.count == 2 }.flatMap { prefix in
            ((try? FileManager.default.contentsOfDirectory(atPath: "\(root)/\(prefix)")) ?? []).filter(AttachmentReference.isSHA256)
        }.sorted()
    }
}
