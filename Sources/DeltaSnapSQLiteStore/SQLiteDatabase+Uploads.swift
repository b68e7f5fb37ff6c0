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
}
