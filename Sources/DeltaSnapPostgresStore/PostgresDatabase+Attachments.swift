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
            var pending: [UInt8] = []
            pending.reserveCapacity(Self.chunkBytes)
            var sequence: Int32 = 0
            func flush() async throws {
                guard !pending.isEmpty else { return }
                try await connection.query(
                    "INSERT INTO deltasnap_blob_chunks(sha256, seq, bytes) VALUES (\(staging), \(sequence), \(ByteBuffer(bytes: pending)))", logger: logger)
                sequence += 1
                pending.removeAll(keepingCapacity: true)
            }
            while let chunk = try await next() {
                try verifier.consume(chunk)
                var rest = chunk[...]
                while !rest.isEmpty {
                    let taken = rest.prefix(Self.chunkBytes - pending.count)
                    pending.append(contentsOf: taken)
                    rest = rest.dropFirst(taken.count)
                    if pending.count == Self.chunkBytes { try await flush() }
                }
            }
            try await flush()
            try verifier.finish()
            let size = Int64(reference.size)
            let now = Int64(Date().timeIntervalSince1970)
            let inserted = try await connection.query(
                """
                INSERT INTO deltasnap_blobs(sha256, size, stored_at) VALUES (\(reference.sha256), \(size), \(now))
                ON CONFLICT (sha256) DO NOTHING RETURNING 1
                """, logger: logger
            ).collect().count
            if inserted == 1 {
                try await connection.query("UPDATE deltasnap_blob_chunks SET sha256 = \(reference.sha256) WHERE sha256 = \(staging)", logger: logger)
            } else {
                try await connection.query("DELETE FROM deltasnap_blob_chunks WHERE sha256 = \(staging)", logger: logger)
            }
        }
    }

    /// The held blob's size, or nil.
    package func attachmentSize(_ sha256: String) async throws -> UInt64? {
        try await rows("SELECT size FROM deltasnap_blobs WHERE sha256 = \(sha256)", as: Int64.self).first.map { UInt64($0) }
    }

    /// The held blob's bytes, a chunk at a time, in order (nil: not held).
    package func readAttachment(_ sha256: String, _ body: ([UInt8]) async throws -> Void) async throws -> Bool {
        try await pool.withConnection { connection in
            var found = false
            let rows = try await connection.query(
                "SELECT bytes FROM deltasnap_blob_chunks WHERE sha256 = \(sha256) ORDER BY seq", logger: logger)
            for try await chunk in rows.decode(ByteBuffer.self) {
                found = true
                try await body(Array(chunk.readableBytesView))
            }
            if found { return true }
            // An empty blob has no chunk rows.
            return try await connection.query("SELECT 1 FROM deltasnap_blobs WHERE sha256 = \(sha256)", logger: logger).collect().count == 1
        }
    }

    /// Schema v5: attachments.
    static let schemaV5 = [
        "CREATE TABLE deltasnap_blobs(sha256 TEXT PRIMARY KEY, size BIGINT NOT NULL, stored_at BIGINT NOT NULL)",
        """
        CREATE TABLE deltasnap_blob_chunks(
            sha256 TEXT NOT NULL, seq INTEGER NOT NULL, bytes BYTEA NOT NULL, PRIMARY KEY(sha256, seq))
        """,
    ]
}
