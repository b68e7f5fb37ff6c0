import DeltaSnapSQLite
import DeltaSnapStore

extension StatementCache {
    /// Raises the SQLite store's publication sequence for a commit at `committedAt`, in the
    /// caller's transaction, and returns it: the one step every writer of the store takes.
    func publishCommit(at committedAt: Int64) throws -> UInt64 {
        let read = try self("SELECT sequence FROM publication WHERE id = 1")
        let previous = try read.step() ? read.int64(0) : 0
        read.reset()
        let sequence = PublicationSequence.next(after: UInt64(previous), at: committedAt)
        let publish = try self("INSERT INTO publication(id, sequence) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET sequence = excluded.sequence")
        try publish.bind(1, sequence)
        try publish.run()
        return sequence
    }
}
