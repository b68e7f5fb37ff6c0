import DeltaSnapCore
import DeltaSnapStore
import Foundation
import NIOCore
import PostgresNIO

/// Resumable uploads on PostgreSQL: a row in `deltasnap_uploads` says how many bytes are
/// durable; the bytes are chunk rows under the upload's own key, renamed to the blob's once
/// proven. Every instance sees them, so an upload resumes on whichever instance the load
/// balancer picks.
extension PostgresDatabase {
    /// The key an upload's chunk rows are kept under until it completes.
    static func uploadKey(_ token: String) -> String { "upload:\(token)" }

    package func createUpload(_ upload: AttachmentUpload) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.checkedQuery("""
                INSERT INTO deltasnap_uploads(token, sha256, size, type, collection, owner, received, created_at)
                VALUES (\(upload.token), \(upload.reference.sha256), \(Int64(upload.reference.size)), \(upload.reference.type),
                        \(upload.collection), \(upload.owner), 0, \(upload.createdAt))
                """, logger: logger)
        }
    }

    package func upload(_ token: String) async throws -> AttachmentUpload? {
        try await pool.withConnection { connection in try await upload(token, on: connection) }
    }

    private func upload(_ token: String, on connection: PostgresConnection, locking: Bool = false) async throws -> AttachmentUpload? {
        let rows = try await connection.checkedQuery(
            locking
                ? "SELECT sha256, size, type, collection, owner, received, created_at FROM deltasnap_uploads WHERE token = \(token) FOR UPDATE"
                : "SELECT sha256, size, type, collection, owner, received, created_at FROM deltasnap_uploads WHERE token = \(token)",
            logger: logger)
        var found: AttachmentUpload?
        for try await (sha256, size, type, collection, owner, received, createdAt) in rows.decode((String, Int64, String, String, String, Int64, Int64).self) {
            found = AttachmentUpload(
                token: token, reference: try AttachmentReference(sha256: sha256, size: UInt64(size), type: type), collection: collection,
                owner: owner, received: UInt64(received), createdAt: createdAt)
        }
        return found
    }

    /// Appends in transactions of ``AttachmentUpload/checkpointBytes``: each writes its chunk
    /// rows and advances `received` only if no one else did meanwhile, so what a `HEAD`
    /// reports is always durable and two appenders cannot interleave.
    package func appendUpload(_ token: String, at offset: UInt64, from next: () async throws -> [UInt8]?) async throws -> UInt64 {
        guard let upload = try await upload(token) else { throw StoreError.unknownUpload(token) }
        guard upload.received == offset else { throw StoreError.uploadOffsetMismatch(token, expected: upload.received) }
        var durable = offset
        var pending: [UInt8] = []
        func checkpoint() async throws {
            guard !pending.isEmpty else { return }
            let (from, bytes) = (durable, pending)
            try await transaction { connection in
                let advanced = try await connection.checkedQuery("""
                    UPDATE deltasnap_uploads SET received = \(Int64(from) + Int64(bytes.count)) WHERE token = \(token) AND received = \(Int64(from))
                    RETURNING 1
                    """, logger: logger).collect().count
                guard advanced == 1 else {
                    guard let now = try await self.upload(token, on: connection) else { throw StoreError.unknownUpload(token) }
                    throw StoreError.uploadOffsetMismatch(token, expected: now.received)
                }
                var writer = ChunkWriter(key: Self.uploadKey(token), at: from)
                try await writer.append(bytes, on: connection, logger: logger)
                try await writer.flush(on: connection, logger: logger)
            }
            durable += UInt64(bytes.count)
            pending.removeAll(keepingCapacity: true)
        }
        do {
            while let chunk = try await next() {
                guard durable + UInt64(pending.count + chunk.count) <= upload.reference.size else {
                    throw StoreError.attachmentMismatch("the attachment \(upload.reference.sha256) is \(upload.reference.size) bytes; more were sent")
                }
                pending += chunk
                if pending.count >= Int(AttachmentUpload.checkpointBytes) { try await checkpoint() }
            }
        } catch {
            // What arrived before the cut is kept: the client resumes after it.
            try? await checkpoint()
            throw error
        }
        try await checkpoint()
        return durable
    }

    /// Proves the upload's bytes by reading its rows back, then gives them the blob's name
    /// — all in one transaction, holding the upload's row, so a concurrent append waits.
    package func completeUpload(_ token: String) async throws {
        let key = Self.uploadKey(token)
        let outcome: StoreError? = try await transaction { connection in
            guard let upload = try await upload(token, on: connection, locking: true) else { throw StoreError.unknownUpload(token) }
            var verifier = BlobVerifier(sha256: upload.reference.sha256, size: upload.reference.size)
            var failure: StoreError?
            do {
                let rows = try await connection.checkedQuery("SELECT bytes FROM deltasnap_blob_chunks WHERE sha256 = \(key) ORDER BY start", logger: logger)
                for try await bytes in rows.decode(ByteBuffer.self) { try verifier.consume(bytes.readableBytesView) }
                try verifier.finish()
            } catch let error as StoreError where error.code == .attachmentMismatch {
                failure = error
            }
            try await connection.checkedQuery("DELETE FROM deltasnap_uploads WHERE token = \(token)", logger: logger)
            if failure != nil {
                try await connection.checkedQuery("DELETE FROM deltasnap_blob_chunks WHERE sha256 = \(key)", logger: logger)
            } else {
                try await keep(key, as: upload.reference, on: connection)
            }
            // Committed either way: a refused upload is gone, not left to be completed again.
            return failure
        }
        if let outcome { throw outcome }
    }

    package func cancelUpload(_ token: String) async throws -> Bool {
        try await transaction { connection in
            let deleted = try await connection.checkedQuery("DELETE FROM deltasnap_uploads WHERE token = \(token) RETURNING 1", logger: logger).collect().count
            try await connection.checkedQuery("DELETE FROM deltasnap_blob_chunks WHERE sha256 = \(Self.uploadKey(token))", logger: logger)
            return deleted == 1
        }
    }

    package func expireUploads(begunBefore seconds: Int64) async throws -> Int {
        try await transaction { connection in
            var keys: [String] = []
            for try await token in try await connection.checkedQuery(
                "DELETE FROM deltasnap_uploads WHERE created_at < \(seconds) RETURNING token", logger: logger
            ).decode(String.self) { keys.append(Self.uploadKey(token)) }
            if !keys.isEmpty { try await connection.checkedQuery("DELETE FROM deltasnap_blob_chunks WHERE sha256 = ANY(\(keys))", logger: logger) }
            return keys.count
        }
    }
}
