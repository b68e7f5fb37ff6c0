import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// A replica's own copies of attachments: a content-addressed directory beside the replica
/// file (`notes.sqlite.attachments/`; a view's partition in `scopes/NAME/KEY/` under it). A
/// file's directory is its state, and every change of state is a `rename`, so a killed app
/// finds each file whole in exactly one place:
///
/// - `pending/HASH`: attached here, not yet known to be on the server. It is never evicted;
///   `pending/HASH.location` holds the URL of its resumable upload once one began.
/// - `cached/HASH`: proven bytes the server holds (downloaded, taken from the bundle, or
///   uploaded). Evictable, and removed once no record refers to it.
/// - `partial/HASH`: a download cut short, resumed with `Range`.
/// - `tmp/`: files being written (cleared when a replica opens the directory).
///
/// ```swift
/// let files = LocalAttachments(replicaPath: "notes.sqlite", scope: "")
/// let reference = try files.attach("photo.jpg", type: "image/jpeg")   // pending/HASH
/// files.path(of: reference.sha256)                                     // where to read it
/// ```
package struct LocalAttachments: Sendable {
    package let root: String

    /// Where an attachment stands on this device (`deltasnap attachments` prints these).
    package enum State: String, Sendable {
        /// Attached here; its upload precedes the push of the write that refers to it.
        case pendingUpload = "pending-upload"
        /// Here, proven.
        case cached
        /// Referred to by a record, not here (lazy, evicted or postponed).
        case remote
    }

    package init(replicaPath: String, scope: String) {
        root = replicaPath + ".attachments" + (scope.isEmpty ? "" : "/scopes/" + scope)
    }

    func pendingPath(_ sha256: String) -> String { "\(root)/pending/\(sha256)" }
    func cachedPath(_ sha256: String) -> String { "\(root)/cached/\(sha256)" }
    func partialPath(_ sha256: String) -> String { "\(root)/partial/\(sha256)" }
    private func locationPath(_ sha256: String) -> String { "\(root)/pending/\(sha256).location" }

    /// The local file holding `sha256`'s bytes (pending or cached), or nil.
    package func path(of sha256: String) -> String? {
        guard AttachmentReference.isSHA256(sha256) else { return nil }
        for path in [cachedPath(sha256), pendingPath(sha256)] where FileManager.default.fileExists(atPath: path) { return path }
        return nil
    }

    package func state(of sha256: String) -> State {
        if FileManager.default.fileExists(atPath: pendingPath(sha256)) { return .pendingUpload }
        return FileManager.default.fileExists(atPath: cachedPath(sha256)) ? .cached : .remote
    }

    /// Copies `file` in (streamed, hashed as it goes, synced, then renamed into `pending/`)
    /// and returns its reference. A file held already is not copied again.
    package func attach(_ file: String, type: String) throws -> AttachmentReference {
        guard let input = FileHandle(forReadingAtPath: file) else { throw AttachmentError.unreadable(file) }
        defer { try? input.close() }
        let (temporary, output) = try newTemporaryFile()
        // No hash to check against yet: the verifier only hashes, with no size to reach.
        var hasher = AttachmentVerifier(sha256: "", size: .max)
        do {
            while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
                try hasher.consume(chunk)
                try output.write(contentsOf: chunk)
            }
            try output.synchronize()
            try output.close()
        } catch {
            try? output.close()
            try? FileManager.default.removeItem(atPath: temporary)
            throw error
        }
        let reference = try AttachmentReference(sha256: hasher.digest, size: hasher.received, type: type)
        if path(of: reference.sha256) != nil {
            try? FileManager.default.removeItem(atPath: temporary)
        } else {
            try move(temporary, to: pendingPath(reference.sha256))
        }
        return reference
    }

    /// The hashes waiting for upload.
    package func pendingHashes() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "\(root)/pending")) ?? []).filter(AttachmentReference.isSHA256).sorted()
    }

    /// The resumable upload `sha256`'s bytes are going to, once one began.
    func uploadLocation(of sha256: String) -> URL? {
        (try? String(contentsOfFile: locationPath(sha256), encoding: .utf8)).flatMap { URL(string: $0) }
    }

    func setUploadLocation(_ location: URL?, of sha256: String) throws {
        guard let location else {
            try? FileManager.default.removeItem(atPath: locationPath(sha256))
            return
        }
        try Data(location.absoluteString.utf8).write(to: URL(fileURLWithPath: locationPath(sha256)), options: .atomic)
    }

    /// The server holds `sha256` now: its file becomes a cached copy.
    func markUploaded(_ sha256: String) throws {
        try move(pendingPath(sha256), to: cachedPath(sha256))
        try? FileManager.default.removeItem(atPath: locationPath(sha256))
    }

    /// Proves `file` against `reference` (every byte read back) and moves it into `cached/`;
    /// removes it and throws ``AttachmentError/mismatch(_:)`` otherwise.
    func keepProven(_ file: String, as reference: AttachmentReference) throws {
        do {
            try Self.prove(file, against: reference)
        } catch {
            try? FileManager.default.removeItem(atPath: file)
            throw error
        }
        try move(file, to: cachedPath(reference.sha256))
    }

    /// Copies a bundled file in once it is proven to be what `reference` says.
    func adoptBundled(_ file: String, as reference: AttachmentReference) throws {
        let (temporary, output) = try newTemporaryFile()
        try? output.close()
        try? FileManager.default.removeItem(atPath: temporary)
        try FileClone.copy(file, to: temporary)
        try keepProven(temporary, as: reference)
    }

    /// Every cached file: its hash, size and when it was last used (its modification time,
    /// touched on use).
    func cachedFiles() -> [(sha256: String, size: UInt64, used: Date)] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "\(root)/cached")) ?? []).filter(AttachmentReference.isSHA256).compactMap { sha256 in
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: cachedPath(sha256)) else { return nil }
            return (sha256, (attributes[.size] as? NSNumber)?.uint64Value ?? 0, attributes[.modificationDate] as? Date ?? .distantPast)
        }
    }

    /// Marks a cached file as just used (eviction goes least recently used first).
    func touch(_ sha256: String) {
        try? FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: cachedPath(sha256))
    }

    /// Removes a cached copy (and any partial download); a pending file is never removed here.
    func evict(_ sha256: String) {
        try? FileManager.default.removeItem(atPath: cachedPath(sha256))
        try? FileManager.default.removeItem(atPath: partialPath(sha256))
    }

    /// Removes the whole directory (a partition that left its view takes its files along).
    func removeAll() {
        try? FileManager.default.removeItem(atPath: root)
    }

    /// Clears files an interrupted write left in `tmp/` an hour or more ago (a younger one
    /// may be another process's write in progress: an app and a CLI share a replica).
    func removeLeftovers(now: Date = Date()) {
        let directory = "\(root)/tmp"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            let path = "\(directory)/\(name)"
            let modified = (try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date) ?? now
            if now.timeIntervalSince(modified) > 3_600 { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    func newTemporaryFile() throws -> (path: String, handle: FileHandle) {
        try FileManager.default.createDirectory(atPath: "\(root)/tmp", withIntermediateDirectories: true)
        let path = "\(root)/tmp/\(UUID().uuidString)"
        guard FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path) else {
            throw AttachmentError.unwritable(path)
        }
        return (path, handle)
    }

    private func move(_ source: String, to destination: String) throws {
        try FileManager.default.createDirectory(atPath: (destination as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        guard rename(source, destination) == 0 else { throw AttachmentError.unwritable(destination) }
    }

    /// Reads `file` through and checks it is exactly `reference`'s bytes.
    static func prove(_ file: String, against reference: AttachmentReference) throws {
        guard let input = FileHandle(forReadingAtPath: file) else { throw AttachmentError.unreadable(file) }
        defer { try? input.close() }
        var verifier = AttachmentVerifier(sha256: reference.sha256, size: reference.size)
        do {
            while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty { try verifier.consume(chunk) }
            try verifier.finish()
        } catch let mismatch as AttachmentMismatch {
            throw AttachmentError.mismatch(mismatch.message)
        }
    }
}

/// Why an attachment could not be attached, uploaded or had.
public enum AttachmentError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A file that cannot be read.
    case unreadable(String)
    /// A file that cannot be written.
    case unwritable(String)
    /// Bytes that are not what the reference says (a corrupt download, a compromised mirror):
    /// nothing was kept.
    case mismatch(String)
    /// The server does not serve it here (`404`): no record it may read refers to it.
    case unavailable(String)
    /// Over the network budget: left for a sync with a larger one.
    case postponed(String)
    /// The server refused it (an upload over its limit, a bad reference).
    case refused(String)
    /// No answer, or one that says to try later.
    case failed(String)

    public var description: String {
        switch self {
        case .unreadable(let path): "\(path) cannot be read"
        case .unwritable(let path): "\(path) cannot be written"
        case .mismatch(let why): "the bytes are not the attachment's: \(why); nothing was kept"
        case .unavailable(let what): "\(what) is not served here"
        case .postponed(let what): "\(what) is over the network budget; postponed"
        case .refused(let why): "refused: \(why)"
        case .failed(let why): why
        }
    }
}
