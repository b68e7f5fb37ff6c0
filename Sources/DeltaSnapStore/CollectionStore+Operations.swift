import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// What every store does the same way, written once on top of its parts (``StoreReader``,
/// ``StoreWriter``, ``AttachmentStore``): these write.
extension StoreWriter {
    /// Upserts or hides `records` as one version (a `PUT`, a `DELETE`): the import rule.
    ///
    /// ```swift
    /// let result = try await store.write([record], to: "countries")
    /// ```
    package func write(_ records: [Record], to collection: String) async throws -> WriteResult {
        try await importRecords(from: RecordStream(records: records, name: "request"), into: collection, replace: false, progress: nil)
    }

    /// Imports several partitions (or collections) in one transaction, recording no position.
    package func importPartitions(_ partitions: [PartitionRecords], replace: Bool) async throws -> [WriteResult] {
        try await importPartitions(partitions, replace: replace, recording: nil)
    }

}

/// What every store does the same way, written once on top of its parts: these read.
extension StoreReader {
    /// ``publishedState(of:confirming:statedAt:)`` with each head read.
    package func publishedState(of names: [String], confirming known: [String: PublishedHead]) async throws -> PublishedState {
        try await publishedState(of: names, confirming: known, statedAt: nil)
    }

    /// Every entry made, then those the caller knew set apart (stores that cannot do better).
    package func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64?) async throws -> PublishedState {
        var state = try await publishedState(of: names)
        state.confirmed = Set(state.entries.filter { entry in
            guard let head = known[entry.collection], let token = ServerToken(entry.token) else { return false }
            return head == PublishedHead(epoch: token.epoch, version: entry.version, floor: entry.floor)
        }.map(\.collection))
        state.entries.removeAll { state.confirmed.contains($0.collection) }
        return state
    }

    /// One read per name (stores that cannot do better).
    package func heads(of names: [String]) async throws -> [CollectionHead] {
        var heads: [CollectionHead] = []
        for name in names { if let head = try await head(of: name) { heads.append(head) } }
        return heads
    }

}

extension StoreWriter {
    /// Imports NDJSON or a JSON array held in memory (a write API body) as one version.
    package func importBatch(_ body: [UInt8], into collection: String, replace: Bool = false) async throws -> WriteResult {
        try await importRecords(from: RecordStream(source: ChunkSources.bytes(body), name: "body"), into: collection, replace: replace, progress: nil)
    }

    /// Compacts `collection` as far as `policy` allows; nil when the floor would not rise.
    ///
    /// ```swift
    /// try await store.compact("countries", policy: .keepVersions(100))
    /// ```
    package func compact(
        _ collection: String, policy: CompactionPolicy, now: Int64 = Int64(Date().timeIntervalSince1970)
    ) async throws -> CompactionResult? {
        guard let head = try await head(of: collection) else { throw StoreError.unknownCollection(collection) }
        var firstKept: UInt64?
        if let since = policy.keptSince(now: now) { firstKept = try await firstVersion(in: collection, committedAtOrAfter: since) }
        let target = policy.floor(for: head, firstVersionKept: firstKept)
        guard target > head.floor else { return nil }
        let removed = try await compact(collection, throughVersion: target)
        return CompactionResult(collection: collection, previousFloor: head.floor, floor: target, tombstonesRemoved: removed)
    }

}

extension StoreReader {
    /// Reads every record of `collection` from one transaction: the visible ones (`after`
    /// nil) or the changes since `after`. The source is closed whatever `body` does.
    package func withRecords<T>(
        in collection: String, after version: UInt64? = nil, _ body: (any RecordSource) async throws -> T
    ) async throws -> T {
        try await openRecords(in: collection, after: version).closing(after: body)
    }

    /// Reads a page of `collection`'s head (``openPage(of:after:limit:)``): the source is
    /// closed whatever `body` does.
    package func withPage<T>(
        of collection: String, after id: String?, limit: Int, _ body: (any RecordSource) async throws -> T
    ) async throws -> T {
        try await openPage(of: collection, after: id, limit: limit).closing(after: body)
    }

    /// Writes the visible records as NDJSON sorted by id, one canonical record a line, in
    /// chunks of about 64 KiB: what `deltasnap export` prints, byte for byte what the
    /// client's `dump` prints for the same state.
    package func export(_ collection: String, write: @escaping ([UInt8]) throws -> Void) async throws {
        try await withRecords(in: collection) { source in
            var writer = NDJSONWriter(write: write)
            while try await source.next({ try writer.append(line: $0) }) {}
            try writer.flush()
        }
    }

}

/// A bake with the files: reads records and attachments.
extension StoreReader where Self: AttachmentStore {
    /// Writes `DIRECTORY/COLLECTION.snapshot` (atomically) from one read and updates
    /// `DIRECTORY/manifest.json`. Deterministic: the same state gives the same bytes,
    /// whichever store holds it.
    ///
    /// ```swift
    /// let entry = try await store.bake("countries", into: "Snapshots")
    /// ```
    @discardableResult
    package func bake(_ collection: String, into directory: String, level: Int32 = 6) async throws -> ManifestEntry {
        try await bake(collection, into: directory, level: level, withAttachments: false).entry
    }

    /// ``bake(_:into:level:)``, and with `withAttachments` every blob the baked records refer
    /// to in `DIRECTORY/attachments/HASH` (read from the same transaction's references, each
    /// proven against its reference as it is written; a file already there with the right
    /// bytes is kept), so an app bundles its files and starts without a download.
    ///
    /// ```swift
    /// let (entry, files) = try await store.bake("notes", into: "Snapshots", withAttachments: true)
    /// ```
    package func bake(
        _ collection: String, into directory: String, level: Int32 = 6, withAttachments: Bool
    ) async throws -> (entry: ManifestEntry, attachments: [AttachmentReference]) {
        var referenced: [String: AttachmentReference] = [:]
        let entry = try await withRecords(in: collection) { source in
            let file = try Baker.SnapshotFile(head: source.head, into: directory, level: level)
            do {
                while try await source.next({ bytes in
                    try file.append(bytes)
                    guard withAttachments else { return }
                    for reference in (try? AttachmentReference.references(in: Record.parse(Array(bytes)))) ?? [] { referenced[reference.sha256] = reference }
                }) {}
                return try file.finish()
            } catch {
                file.abandon()
                throw error
            }
        }
        let references = referenced.values.sorted { $0.sha256 < $1.sha256 }
        for reference in references { try await bakeAttachment(reference, into: (directory as NSString).appendingPathComponent("attachments")) }
        return (entry, references)
    }

    /// Writes the blob `reference` names to `DIRECTORY/HASH`, proven, unless it is there already.
    private func bakeAttachment(_ reference: AttachmentReference, into directory: String) async throws {
        let path = (directory as NSString).appendingPathComponent(reference.sha256)
        if let existing = FileManager.default.contents(atPath: path), existing.count == reference.size {
            var verifier = BlobVerifier(sha256: reference.sha256, size: reference.size)
            if (try? verifier.consume(existing)) != nil, (try? verifier.finish()) != nil { return }
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let temporary = path + ".tmp-\(ProcessInfo.processInfo.processIdentifier)"
        guard FileManager.default.createFile(atPath: temporary, contents: nil), let file = FileHandle(forWritingAtPath: temporary) else {
            throw FileError(path: temporary, reason: "cannot be created")
        }
        do {
            var verifier = BlobVerifier(sha256: reference.sha256, size: reference.size)
            try await readAttachment(reference.sha256, range: 0..<reference.size) { chunk in
                try verifier.consume(chunk)
                try file.write(contentsOf: chunk)
            }
            try verifier.finish()
            try file.close()
            guard rename(temporary, path) == 0 else { throw FileError(path: path, reason: "cannot be replaced") }
        } catch {
            try? file.close()
            try? FileManager.default.removeItem(atPath: temporary)
            throw error
        }
    }

}

extension StoreReader {
    /// Writes `DIRECTORY/COLLECTION.index`, signed, for the collection's current state
    /// (issued at its last commit, so the file is deterministic too).
    @discardableResult
    package func writeSignedIndex(_ collection: String, keys: [IndexSigningKey], into directory: String) async throws -> SignedIndex {
        // The head and the published entry come from two reads: retry until they agree.
        for _ in 0..<10 {
            let published = try await publishedState(of: [collection])
            guard let entry = published.entries.first, let head = try await head(of: collection) else {
                throw StoreError.unknownCollection(collection)
            }
            guard head.token.description == entry.token else { continue }
            return try Baker.writeSignedIndex(sequence: published.sequence, entry: entry, head: head, keys: keys, into: directory)
        }
        throw StoreError.busy("collection \(collection) kept changing while its index was written; retry")
    }
}

extension RecordSource {
    /// Runs `body` on this source, then closes it whatever `body` does: the one rule of
    /// ``CollectionStore/withRecords(in:after:_:)`` and ``CollectionStore/withPage(of:after:limit:_:)``.
    func closing<T>(after body: (any RecordSource) async throws -> T) async throws -> T {
        do {
            let result = try await body(self)
            await close()
            return result
        } catch {
            await close()
            throw error
        }
    }
}
