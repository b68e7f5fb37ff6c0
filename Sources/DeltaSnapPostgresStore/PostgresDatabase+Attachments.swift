import DeltaSnapCore
import DeltaSnapStore
import Foundation
import NIOCore
import PostgresNIO

/// Attachments on PostgreSQL: in the database, so every instance serves every blob.
/// `deltasnap_blobs` names each blob held (verified); its bytes are rows of at most
/// ``chunkBytes`` in `deltasnap_blob_chunks`, written and read one chunk at a time, never
/// whole in memory.
extension PostgresDatabase {
    /// The bytes per chunk row: large enough that a 1 GiB blob is a thousand rows, small
    /// enough that a row is never a burden for the server or the client's buffers.
    static let chunkBytes = 1 << 20

    /// Keeps the blob `reference` names, read from `next`, once its size and SHA-256 are
    /// proven (``BlobVerifier``), in one transaction: a refused or interrupted upload leaves
    /// nothing. The chunks go in under a key of their own and take the blob's name at the
    /// end, so two uploads of the same bytes never collide; the second one's are dropped.
    /// Every byte is read and checked even when the blob is held already (no existence oracle).
    package func storeAttachment(_ reference: AttachmentReference, from next: () async throws -> [UInt8]?) async throws {
        let staging = "\(reference.sha256).\(UInt64.random(in: 0...UInt64.max))"
        try await transaction { connection in
            var verifier = BlobVerifier(sha256: reference.sha256, size: reference.size)
            var writer = ChunkWriter(key: staging, at: 0)
            while let chunk = try await next() {
                try verifier.consume(chunk)
                try await writer.append(chunk, on: connection, logger: logger)
            }
            try await writer.flush(on: connection, logger: logger)
            try verifier.finish()
            try await keep(staging, as: reference, on: connection)
        }
    }

    /// Gives the chunk rows under `staging` (proven bytes) the blob's name, or drops them
    /// when the blob is held already.
    func keep(_ staging: String, as reference: AttachmentReference, on connection: PostgresConnection) async throws {
        let now = Int64(Date().timeIntervalSince1970)
        let inserted = try await connection.checkedQuery(
            """
            INSERT INTO deltasnap_blobs(sha256, size, stored_at) VALUES (\(reference.sha256), \(Int64(reference.size)), \(now))
            ON CONFLICT (sha256) DO NOTHING RETURNING 1
            """, logger: logger
        ).collect().count
        if inserted == 1 {
            try await connection.checkedQuery("UPDATE deltasnap_blob_chunks SET sha256 = \(reference.sha256) WHERE sha256 = \(staging)", logger: logger)
        } else {
            try await connection.checkedQuery("DELETE FROM deltasnap_blob_chunks WHERE sha256 = \(staging)", logger: logger)
            // Stored again: garbage collection's grace period starts over (the uploader's
            // record is on its way).
            try await connection.checkedQuery("UPDATE deltasnap_blobs SET stored_at = \(now) WHERE sha256 = \(reference.sha256)", logger: logger)
        }
    }

    /// The held blob's size, or nil.
    package func attachmentSize(_ sha256: String) async throws -> UInt64? {
        try await rows("SELECT size FROM deltasnap_blobs WHERE sha256 = \(sha256)", as: Int64.self).first.map { UInt64($0) }
    }

    /// The blob `sha256` as `collection`'s records refer to it, when held and referred to there.
    package func attachment(_ sha256: String, in collection: String) async throws -> AttachmentReference? {
        let found = try await pool.withConnection { connection in
            var found: (Int64, String)?
            for try await row in try await connection.checkedQuery("""
                SELECT b.size, r.type FROM deltasnap_attachment_refs r
                JOIN deltasnap_collections c ON c.cid = r.cid JOIN deltasnap_blobs b ON b.sha256 = r.sha256
                WHERE c.name = \(collection) AND r.sha256 = \(sha256)
                """, logger: logger).decode((Int64, String).self) { found = row }
            return found
        }
        guard let (size, type) = found else { return nil }
        return try AttachmentReference(sha256: sha256, size: UInt64(size), type: type)
    }

    /// Calls `body` with the bytes of `range` of the held blob, in order, a chunk row at a
    /// time (only the rows the range covers are read: a row is named by the offset it starts at). Throws ``StoreError/missingAttachment(_:)``
    /// when the blob is not held or ends before the range does.
    package func readAttachment(_ sha256: String, range: Range<UInt64>, _ body: ([UInt8]) async throws -> Void) async throws {
        guard try await attachmentSize(sha256) != nil else { throw StoreError.missingAttachment("the store does not hold attachment \(sha256)") }
        guard !range.isEmpty else { return }
        var delivered = range.lowerBound
        try await pool.withConnection { connection in
            // Rows are at most chunkBytes long: those that may overlap the range, by their start.
            let from = Int64(range.lowerBound) - Int64(Self.chunkBytes) + 1
            let rows = try await connection.checkedQuery("""
                SELECT start, bytes FROM deltasnap_blob_chunks
                WHERE sha256 = \(sha256) AND start >= \(from) AND start < \(Int64(range.upperBound)) ORDER BY start
                """, logger: logger)
            for try await (start, bytes) in rows.decode((Int64, ByteBuffer).self) {
                let start = UInt64(start)
                let end = start + UInt64(bytes.readableBytes)
                guard end > delivered, start <= delivered else { continue }
                let lower = Int(delivered - start)
                let upper = Int(min(range.upperBound, end) - start)
                try await body(Array(bytes.readableBytesView[bytes.readerIndex + lower ..< bytes.readerIndex + upper]))
                delivered += UInt64(upper - lower)
            }
        }
        guard delivered == range.upperBound else {
            throw StoreError.missingAttachment("attachment \(sha256) ends at byte \(delivered), before \(range.upperBound)")
        }
    }

    /// The sizes of the blobs among `hashes` the store holds, for a write in the caller's
    /// transaction that may refer to them. It first takes `ROW EXCLUSIVE` on
    /// `deltasnap_attachment_refs`, which garbage collection's lock excludes: a blob found
    /// here is not removed before the write commits.
    func attachmentSizes(_ hashes: [String], on connection: PostgresConnection) async throws -> [String: UInt64] {
        guard !hashes.isEmpty else { return [:] }
        try await connection.checkedQuery("LOCK TABLE deltasnap_attachment_refs IN ROW EXCLUSIVE MODE", logger: logger)
        var sizes: [String: UInt64] = [:]
        for try await (sha256, size) in try await connection.checkedQuery(
            "SELECT sha256, size FROM deltasnap_blobs WHERE sha256 = ANY(\(hashes))", logger: logger
        ).decode((String, Int64).self) { sizes[sha256] = UInt64(size) }
        return sizes
    }

    /// Notes that `sha256` was uploaded into `collection` (see ``DeltaSnapStore/CollectionStore/noteAttachmentUpload(_:into:)``).
    package func noteAttachmentUpload(_ sha256: String, into collection: String) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.checkedQuery("""
                INSERT INTO deltasnap_attachment_possession(collection, sha256) VALUES (\(collection), \(sha256)) ON CONFLICT DO NOTHING
                """, logger: logger)
        }
    }

    /// Whether `sha256` was uploaded into `collection` and is still held.
    package func attachmentUploaded(_ sha256: String, into collection: String) async throws -> Bool {
        let found = try await rows("""
            SELECT 1 FROM deltasnap_attachment_possession p JOIN deltasnap_blobs b ON b.sha256 = p.sha256
            WHERE p.collection = \(collection) AND p.sha256 = \(sha256)
            """, as: Int32.self)
        return !found.isEmpty
    }

    /// At most `limit` collections and partitions whose records refer to `sha256`, in no
    /// particular order: unsorted, the index stops at `limit`.
    package func collections(referringTo sha256: String, limit: Int) async throws -> [String] {
        try await rows("""
            SELECT c.name FROM deltasnap_attachment_refs r JOIN deltasnap_collections c ON c.cid = r.cid
            WHERE r.sha256 = \(sha256) LIMIT \(Int64(limit))
            """, as: String.self)
    }

    /// Which of `hashes` the records of collection `cid` refer to (or did, until the next
    /// garbage collection): a push may name them again without proof.
    func referred(_ hashes: [String], by cid: Int64, on connection: PostgresConnection) async throws -> Set<String> {
        guard !hashes.isEmpty else { return [] }
        var found = Set<String>()
        for try await sha256 in try await connection.checkedQuery(
            "SELECT sha256 FROM deltasnap_attachment_refs WHERE cid = \(cid) AND sha256 = ANY(\(hashes))", logger: logger
        ).decode(String.self) { found.insert(sha256) }
        return found
    }

    /// Schema v9: which scopes each blob was uploaded into — what a writer there may name
    /// (docs/PROTOCOL.md §12.2). A scope whose records refer to a blob proves it already.
    static let schemaV9 = [
        "CREATE TABLE deltasnap_attachment_possession(collection TEXT NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY(collection, sha256))",
        "CREATE INDEX deltasnap_attachment_possession_by_hash ON deltasnap_attachment_possession(sha256)",
    ]

    /// Schema v6: which collections' (and partitions') records refer to which blob, with the
    /// media type the first such reference stated — who may read a blob, and what it is served
    /// as — and since when an unreferenced blob has been so (garbage collection).
    ///
    /// A chunk row is named by the offset it starts at, not its number: an upload resumed
    /// mid-row writes rows of other lengths.
    static let schemaV6 = [
        "CREATE TABLE deltasnap_attachment_refs(cid BIGINT NOT NULL, sha256 TEXT NOT NULL, type TEXT NOT NULL, PRIMARY KEY(cid, sha256))",
        "CREATE INDEX deltasnap_attachment_refs_by_hash ON deltasnap_attachment_refs(sha256)",
        "CREATE TABLE deltasnap_attachment_orphans(sha256 TEXT PRIMARY KEY, since BIGINT NOT NULL)",
        "ALTER TABLE deltasnap_blob_chunks RENAME COLUMN seq TO start",
        "ALTER TABLE deltasnap_blob_chunks ALTER COLUMN start TYPE BIGINT USING start::bigint * \(chunkBytes)",
        """
        CREATE TABLE deltasnap_uploads(
            token TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size BIGINT NOT NULL, type TEXT NOT NULL, collection TEXT NOT NULL,
            owner TEXT NOT NULL, received BIGINT NOT NULL, created_at BIGINT NOT NULL)
        """,
    ]

    /// Schema v5: attachments.
    static let schemaV5 = [
        "CREATE TABLE deltasnap_blobs(sha256 TEXT PRIMARY KEY, size BIGINT NOT NULL, stored_at BIGINT NOT NULL)",
        """
        CREATE TABLE deltasnap_blob_chunks(
            sha256 TEXT NOT NULL, seq INTEGER NOT NULL, bytes BYTEA NOT NULL, PRIMARY KEY(sha256, seq))
        """,
    ]
}

/// Writes bytes as chunk rows of at most ``PostgresDatabase/chunkBytes`` under one key, each
/// named by the offset it starts at.
struct ChunkWriter {
    let key: String
    /// Where the pending bytes start.
    private(set) var offset: UInt64
    private var pending: [UInt8] = []

    init(key: String, at offset: UInt64) {
        self.key = key
        self.offset = offset
        pending.reserveCapacity(PostgresDatabase.chunkBytes)
    }

    /// The bytes written so far (rows and pending).
    var end: UInt64 { offset + UInt64(pending.count) }

    mutating func append(_ bytes: [UInt8], on connection: PostgresConnection, logger: Logger) async throws {
        var rest = bytes[...]
        while !rest.isEmpty {
            let taken = rest.prefix(PostgresDatabase.chunkBytes - pending.count)
            pending.append(contentsOf: taken)
            rest = rest.dropFirst(taken.count)
            if pending.count == PostgresDatabase.chunkBytes { try await flush(on: connection, logger: logger) }
        }
    }

    /// Writes the pending bytes as a row (a short one, at the end or at a checkpoint).
    mutating func flush(on connection: PostgresConnection, logger: Logger) async throws {
        guard !pending.isEmpty else { return }
        try await connection.checkedQuery(
            "INSERT INTO deltasnap_blob_chunks(sha256, start, bytes) VALUES (\(key), \(Int64(offset)), \(ByteBuffer(bytes: pending)))", logger: logger)
        offset += UInt64(pending.count)
        pending.removeAll(keepingCapacity: true)
    }
}
