import DeltaSnapSQLite
import DeltaSnapCore

extension StatementCache {
    /// Notes that collection `cid`'s records refer to `references` — who may read each blob —
    /// in the caller's transaction: the one place a SQLite write records it
    /// (``CollectionWriter`` for every write, `NewPartitions` for a partitioned import's new
    /// partitions).
    func noteReferences(_ references: [AttachmentReference], of cid: Int64) throws {
        guard !references.isEmpty else { return }
        let insert = try self("INSERT OR IGNORE INTO attachment_refs(cid, sha256, type) VALUES (?, ?, ?)")
        for reference in references {
            try insert.bind(1, cid)
            try insert.bind(2, reference.sha256)
            try insert.bind(3, reference.type)
            try insert.run()
        }
    }
}
