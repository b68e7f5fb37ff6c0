import DeltaSnapSQLite

/// The sequence number a signed index carries: it must never go down for what clients see as
/// one publication, even when the data owner rebuilds the store from scratch (a new epoch).
///
/// Each commit takes `max(previous + 1, commit time in microseconds)`: a store rebuilt later
/// starts above anything the old one issued (unless the old one averaged more than a million
/// commits a second), and several `serve` processes on one store read the same number.
public enum PublicationSequence {
    public static func next(after previous: UInt64, at seconds: Int64) -> UInt64 {
        max(previous &+ 1, UInt64(max(0, seconds)) &* 1_000_000)
    }
}

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
