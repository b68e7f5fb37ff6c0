import DeltaSnapCore
import DeltaSnapStore

/// The rows of resumable uploads (their bytes are in ``BlobDirectory``).
extension SQLiteDatabase {
    package func createUpload(_ upload: AttachmentUpload) throws {
        let insert = try db.prepare("""
            INSERT INTO attachment_uploads(token, sha256, size, type, collection, owner, received, created_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?)
            """)
        try insert.bind(1, upload.token)
        try insert.bind(2, upload.reference.sha256)
        try insert.bind(3, upload.reference.size)
        try insert.bind(4, upload.reference.type)
        try insert.bind(5, upload.collection)
        try insert.bind(6, upload.owner)
        try insert.bind(7, upload.createdAt)
        try insert.run()
    }

    package func upload(_ token: String) throws -> AttachmentUpload? {
        let select = try db.prepare("SELECT sha256, size, type, collection, owner, received, created_at FROM attachment_uploads WHERE token = ?")
        try select.bind(1, token)
        guard try select.step() else { return nil }
        defer { select.reset() }
        return AttachmentUpload(
            token: token, reference: try AttachmentReference(sha256: select.string(0), size: select.uint64(1), type: select.string(2)),
            collection: select.string(3), owner: select.string(4), received: select.uint64(5), createdAt: select.int64(6))
    }

    /// Records that upload `token` holds `received` bytes durably, if it held `previous`:
    /// two appenders of one upload cannot both advance it.
    package func advanceUpload(_ token: String, from previous: UInt64, to received: UInt64) throws {
        let update = try db.prepare("UPDATE attachment_uploads SET received = ? WHERE token = ? AND received = ?")
        try update.bind(1, received)
        try update.bind(2, token)
        try update.bind(3, previous)
        try update.run()
        guard db.changes == 1 else {
            guard let upload = try upload(token) else { throw StoreError.unknownUpload(token) }
            throw StoreError.uploadOffsetMismatch(token, expected: upload.received)
        }
    }

    /// Removes upload `token`'s row; false when there was none.
    package func deleteUpload(_ token: String) throws -> Bool {
        let delete = try db.prepare("DELETE FROM attachment_uploads WHERE token = ?")
        try delete.bind(1, token)
        try delete.run()
        return db.changes == 1
    }

    /// Removes the rows of uploads begun before `seconds` and returns their tokens.
    package func deleteUploads(begunBefore seconds: Int64) throws -> [String] {
        let select = try db.prepare("DELETE FROM attachment_uploads WHERE created_at < ? RETURNING token")
        try select.bind(1, seconds)
        var tokens: [String] = []
        while try select.step() { tokens.append(select.string(0)) }
        return tokens
    }

    /// Notes that `sha256` was uploaded into `collection` (see ``DeltaSnapStore/CollectionStore/noteAttachmentUpload(_:into:)``).
    package func noteAttachmentUpload(_ sha256: String, into collection: String) throws {
        let insert = try db.prepare("INSERT OR IGNORE INTO attachment_possession(collection, sha256) VALUES (?, ?)")
        try insert.bind(1, collection)
        try insert.bind(2, sha256)
        try insert.run()
    }

    /// Whether `sha256` was uploaded into `collection`.
    package func attachmentUploaded(_ sha256: String, into collection: String) throws -> Bool {
        let select = try db.prepare("SELECT 1 FROM attachment_possession WHERE collection = ? AND sha256 = ?")
        try select.bind(1, collection)
        try select.bind(2, sha256)
        defer { select.reset() }
        return try select.step()
    }

    /// At most `limit` collections and partitions whose records refer to `sha256`, in no
    /// particular order: unsorted, the index stops at `limit` (a file a million partitions
    /// share is not read whole on each push).
    package func collections(referringTo sha256: String, limit: Int) throws -> [String] {
        let select = try db.prepare("""
            SELECT c.name FROM attachment_refs r JOIN collections c ON c.cid = r.cid WHERE r.sha256 = ? LIMIT ?
            """)
        try select.bind(1, sha256)
        try select.bind(2, Int64(limit))
        var names: [String] = []
        while try select.step() { names.append(select.string(0)) }
        return names
    }
}
