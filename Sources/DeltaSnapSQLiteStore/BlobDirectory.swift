import DeltaSnapCore
import DeltaSnapStore
import Foundation

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
            try await queue.run {
                try file.synchronize()
                try file.close()
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

    /// The most bytes one read of a blob returns.
    package static let readChunkBytes: UInt64 = 1 << 20

    /// The held blob `sha256`, open for reading; throws ``StoreError/missingAttachment(_:)``
    /// when it is not held.
    package func open(_ sha256: String) throws -> BlobFile {
        guard AttachmentReference.isSHA256(sha256) else { throw StoreError.missingAttachment("\"\(sha256)\" is not a SHA-256") }
        let descriptor = openForReading(path(of: sha256))
        guard descriptor >= 0 else { throw StoreError.missingAttachment("the store does not hold attachment \(sha256)") }
        return BlobFile(descriptor: descriptor, sha256: sha256)
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

/// A held blob open for reading. Its bytes never change (a blob is renamed into place once
/// verified and only ever unlinked), so reads at any offset need no lock; an unlinked
/// blob stays readable through this descriptor until ``close()``.
package final class BlobFile: Sendable {
    private let descriptor: Int32
    private let sha256: String

    init(descriptor: Int32, sha256: String) {
        self.descriptor = descriptor
        self.sha256 = sha256
    }

    /// Up to `count` bytes at `offset`; fewer only at the end of the blob.
    package func read(_ count: Int, at offset: UInt64) throws -> [UInt8] {
        try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            initialized = 0
            while initialized < count {
                let read = pread(descriptor, buffer.baseAddress! + initialized, count - initialized, off_t(offset) + off_t(initialized))
                if read < 0 && errno == EINTR { continue }
                guard read >= 0 else { throw StoreError.database("cannot read attachment \(sha256): errno \(errno)") }
                if read == 0 { break }
                initialized += read
            }
        }
    }

    package func close() {
        closeDescriptor(descriptor)
    }
}

// At file scope, where the methods named `open` and `close` do not hide the system's.
private func openForReading(_ path: String) -> Int32 { open(path, O_RDONLY | O_CLOEXEC) }
private func closeDescriptor(_ descriptor: Int32) { _ = close(descriptor) }

// MARK: - Resumable uploads

/// An upload's bytes are a file in `uploads/` (never in `tmp/`, which the writer empties at
/// its opening: an upload outlives a restart). Its row in the database says how many of them
/// are durable; bytes past that are dropped before an append goes on.
extension BlobDirectory {
    package func uploadPath(_ token: String) -> String {
        precondition(AttachmentUpload.isToken(token), "not an upload token: \(token)")
        return "\(root)/uploads/\(token)"
    }

    /// Appends what `next` yields to `upload`'s file, from the bytes it holds durably; every
    /// ``AttachmentUpload/checkpointBytes``, and when `next` ends or throws, syncs the file
    /// (on `queue`) and calls `checkpoint(from, to)` to record the durable length. Returns it.
    package func append(
        to upload: AttachmentUpload, from next: () async throws -> [UInt8]?, syncingOn queue: BlockingQueue,
        checkpoint: (_ from: UInt64, _ to: UInt64) async throws -> Void
    ) async throws -> UInt64 {
        try FileManager.default.createDirectory(atPath: root + "/uploads", withIntermediateDirectories: true)
        let path = uploadPath(upload.token)
        let descriptor = openForWriting(path)
        guard descriptor >= 0 else { throw StoreError.database("cannot open \(path): errno \(errno)") }
        defer { closeDescriptor(descriptor) }
        // Bytes a crash left past the last checkpoint were never reported to the client.
        guard ftruncate(descriptor, off_t(upload.received)) == 0 else { throw StoreError.database("cannot truncate \(path): errno \(errno)") }
        var durable = upload.received
        var written = durable
        func sync() async throws {
            guard written > durable else { return }
            try await queue.run {
                guard fsync(descriptor) == 0 else { throw StoreError.database("cannot sync \(path): errno \(errno)") }
            }
            try await checkpoint(durable, written)
            durable = written
        }
        do {
            while let chunk = try await next() {
                guard written + UInt64(chunk.count) <= upload.reference.size else {
                    throw StoreError.attachmentMismatch("the attachment \(upload.reference.sha256) is \(upload.reference.size) bytes; more were sent")
                }
                try write(chunk, to: descriptor, at: written, path: path)
                written += UInt64(chunk.count)
                if written - durable >= AttachmentUpload.checkpointBytes { try await sync() }
            }
        } catch {
            // What arrived before the cut is kept: the client resumes after it.
            try? await sync()
            throw error
        }
        try await sync()
        return durable
    }

    /// Proves the upload's file (its size, its SHA-256, read back on `queue`) and moves it
    /// into place as the blob; removes it and throws ``StoreError/attachmentMismatch(_:)`` otherwise.
    package func complete(_ upload: AttachmentUpload, readingOn queue: BlockingQueue) async throws {
        let path = uploadPath(upload.token)
        let reference = upload.reference
        do {
            try await queue.run {
                let descriptor = openForReading(path)
                guard descriptor >= 0 else { throw StoreError.attachmentMismatch("the attachment \(reference.sha256) is \(reference.size) bytes; 0 were sent") }
                let file = BlobFile(descriptor: descriptor, sha256: reference.sha256)
                defer { file.close() }
                var verifier = BlobVerifier(sha256: reference.sha256, size: reference.size)
                var offset: UInt64 = 0
                while true {
                    let chunk = try file.read(Int(Self.readChunkBytes), at: offset)
                    if chunk.isEmpty { break }
                    try verifier.consume(chunk)
                    offset += UInt64(chunk.count)
                }
                try verifier.finish()
                let destination = self.path(of: reference.sha256)
                try FileManager.default.createDirectory(atPath: String(destination.dropLast(reference.sha256.count + 1)), withIntermediateDirectories: true)
                guard rename(path, destination) == 0 else { throw StoreError.database("cannot move \(path) to \(destination): errno \(errno)") }
            }
        } catch {
            removeUpload(upload.token)
            throw error
        }
    }

    /// Removes an upload's bytes, if any.
    package func removeUpload(_ token: String) {
        guard AttachmentUpload.isToken(token) else { return }
        try? FileManager.default.removeItem(atPath: uploadPath(token))
    }

    private func write(_ bytes: [UInt8], to descriptor: Int32, at offset: UInt64, path: String) throws {
        try bytes.withUnsafeBytes { buffer in
            var done = 0
            while done < buffer.count {
                let wrote = pwrite(descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
                if wrote < 0 && errno == EINTR { continue }
                guard wrote > 0 else { throw StoreError.database("cannot write \(path): errno \(errno)") }
                done += wrote
            }
        }
    }
}

private func openForWriting(_ path: String) -> Int32 { open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600) }
