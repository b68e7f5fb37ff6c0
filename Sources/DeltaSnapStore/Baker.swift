import Crypto
import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// One collection's entry in `manifest.json`.
package struct ManifestEntry: Sendable, Equatable {
    package var collection: String
    package var token: String
    package var lastModified: String
    package var count: Int
    package var checksum: String
    /// Size of the `.snapshot` file in bytes.
    package var bytes: Int
    /// SHA-256 of the `.snapshot` file, lowercase hex.
    package var sha256: String

    var json: JSONValue {
        .object([
            JSONMember("bytes", .number(String(bytes))),
            JSONMember("checksum", .string(checksum)),
            JSONMember("count", .number(String(count))),
            JSONMember("file", .string(Snapshot.fileName(for: collection))),
            JSONMember("lastModified", .string(lastModified)),
            JSONMember("sha256", .string(sha256)),
            JSONMember("token", .string(token)),
        ])
    }
}

/// Bakes a collection into a deterministic, gzip-compressed snapshot file plus a manifest.
///
/// The same store state always gives byte-identical files: records in id order, a fixed
/// body layout, and a gzip header with no time or name. Records are streamed from the store
/// through zlib to disk, so a million records use bounded memory. A store bakes with
/// ``CollectionStore/bake(_:into:level:)``; these are the file formats it writes.
///
/// ```swift
/// let entry = try await store.bake("countries", into: "Snapshots")
/// print(entry.sha256, entry.bytes)
/// ```
package enum Baker {
    package static let manifestName = "manifest.json"
    /// How long a bundled index stays valid. A client does not check a bundled index's
    /// expiry (the app binary carried it); the field is there for tools that inspect it.
    package static let bundledIndexLifetime: Int64 = 10 * 365 * 86_400

    /// Writes `DIRECTORY/COLLECTION.index` for a state read from any store (one transaction).
    @discardableResult
    package static func writeSignedIndex(
        sequence: UInt64, entry: SignedIndex.Entry, head: CollectionHead, keys: [IndexSigningKey], into directory: String
    ) throws -> SignedIndex {
        let index = SignedIndex(sequence: sequence, issued: head.committedAt, expires: head.committedAt + bundledIndexLifetime, entries: [entry])
            .signed(with: keys)
        let path = (directory as NSString).appendingPathComponent(entry.collection + SignedIndex.fileExtension)
        let temporary = path + ".tmp-\(ProcessInfo.processInfo.processIdentifier)"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(index.document)) else { throw FileError(path: temporary, reason: "cannot be created") }
        guard rename(temporary, path) == 0 else {
            try? FileManager.default.removeItem(atPath: temporary)
            throw FileError(path: path, reason: "cannot be replaced")
        }
        return index
    }

    /// A snapshot being written: the records of one read of any store go in, in id order;
    /// ``finish()`` makes it visible (rename) and records it in the manifest. The bytes
    /// depend only on the state, never on the store that held it.
    ///
    /// ```swift
    /// let file = try Baker.SnapshotFile(head: head, into: "Snapshots")
    /// for record in records { try file.append(record) }
    /// let entry = try file.finish()
    /// ```
    package final class SnapshotFile {
        private let directory: String
        private let finalPath: String
        private let temporaryPath: String
        private let file: FileHandle
        private let header: BodyHeader
        private var encoder: BodyEncoder
        private let compressor: GzipCompressor
        private var plain: [UInt8]
        private var compressed: [UInt8] = []
        private var sha = SHA256()
        private var size = 0
        private var done = false

        package init(head: CollectionHead, into directory: String, level: Int32 = 6) throws {
            self.directory = directory
            finalPath = (directory as NSString).appendingPathComponent(Snapshot.fileName(for: head.name))
            // A partition's snapshot lands in a directory of its collection: OUT/sets/8271.snapshot.
            try FileManager.default.createDirectory(atPath: (finalPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            temporaryPath = finalPath + ".tmp-\(ProcessInfo.processInfo.processIdentifier)"
            guard FileManager.default.createFile(atPath: temporaryPath, contents: nil),
                  let file = FileHandle(forWritingAtPath: temporaryPath)
            else { throw FileError(path: temporaryPath, reason: "cannot be created") }
            self.file = file
            header = BodyHeader(
                collection: head.name, kind: .full, token: head.token.description,
                lastModified: head.lastModified, checksum: head.checksum, count: head.count)
            encoder = BodyEncoder(header: header)
            compressor = try GzipCompressor(level: level)
            plain = encoder.start()
            compressed.reserveCapacity(128 * 1024)
        }

        deinit {
            abandon()
        }

        /// Adds one visible record's canonical bytes.
        package func append(_ bytes: UnsafeRawBufferPointer) throws {
            encoder.appendCanonical(bytes, into: &plain)
            if plain.count >= 64 * 1024 {
                compressor.compress(plain, into: &compressed)
                plain.removeAll(keepingCapacity: true)
                if compressed.count >= 64 * 1024 { try emit() }
            }
        }

        /// Completes the file, renames it into place and updates the manifest.
        package func finish() throws -> ManifestEntry {
            encoder.finish(into: &plain)
            compressor.compress(plain, into: &compressed)
            compressor.finish(into: &compressed)
            try emit()
            try file.synchronize()
            try file.close()
            if FileManager.default.fileExists(atPath: finalPath) { try FileManager.default.removeItem(atPath: finalPath) }
            try FileManager.default.moveItem(atPath: temporaryPath, toPath: finalPath)
            done = true
            let entry = ManifestEntry(
                collection: header.collection, token: header.token, lastModified: header.lastModified, count: header.count,
                checksum: header.checksum.description, bytes: size,
                sha256: sha.finalize().map { String(format: "%02x", $0) }.joined())
            try updateManifest(in: directory, with: entry)
            return entry
        }

        /// Removes the temporary file (a failed read); safe to call twice.
        package func abandon() {
            guard !done else { return }
            done = true
            try? file.close()
            try? FileManager.default.removeItem(atPath: temporaryPath)
        }

        private func emit() throws {
            guard !compressed.isEmpty else { return }
            sha.update(data: compressed)
            size += compressed.count
            try file.write(contentsOf: compressed)
            compressed.removeAll(keepingCapacity: true)
        }
    }

    /// Replaces `entry`'s collection in the manifest, keeping the others, sorted by name.
    static func updateManifest(in directory: String, with entry: ManifestEntry) throws {
        let path = (directory as NSString).appendingPathComponent(manifestName)
        var collections: [String: JSONValue] = [:]
        if let existing = FileManager.default.contents(atPath: path) {
            let value = try JSONReader(bytes: [UInt8](existing)).readValue()
            if case .object(let members)? = value["collections"] {
                for member in members { collections[member.key] = member.value }
            }
        }
        collections[entry.collection] = entry.json
        // One collection per line: deterministic, and a diff shows which collection changed.
        var out = Array("{\"format\":1,\"collections\":{\n".utf8)
        for (index, name) in collections.keys.sorted(by: { $0.utf8Precedes($1) }).enumerated() {
            if index > 0 { out.append(contentsOf: Array(",\n".utf8)) }
            CanonicalJSON.writeString(name, into: &out)
            out.append(UInt8(ascii: ":"))
            CanonicalJSON.write(collections[name]!, into: &out)
        }
        out.append(contentsOf: Array("\n}}\n".utf8))
        let temporary = path + ".tmp"
        try Data(out).write(to: URL(fileURLWithPath: temporary))
        if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
        try FileManager.default.moveItem(atPath: temporary, toPath: path)
    }
}
