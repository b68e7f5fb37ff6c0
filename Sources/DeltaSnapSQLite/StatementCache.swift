/// Statements prepared once per connection and reused, for work that runs the same few
/// statements many times: local writes on a replica, or a partitioned import that opens a
/// writer per partition (ten statements each; preparing them was most of a small
/// partition's cost). A statement handed out is reset, so a use must finish (step to the
/// end, or reset) before the same SQL is asked for again.
///
/// ```swift
/// let statements = StatementCache(db)
/// let lookup = try statements("SELECT body FROM records WHERE id = ?")
/// ```
package final class StatementCache {
    private let db: SQLiteConnection
    private var statements: [String: SQLiteStatement] = [:]

    package init(_ db: SQLiteConnection) {
        self.db = db
    }

    package func callAsFunction(_ sql: String) throws -> SQLiteStatement {
        if let cached = statements[sql] {
            cached.reset()
            return cached
        }
        let prepared = try db.prepare(sql)
        statements[sql] = prepared
        return prepared
    }

    /// Finalizes every statement (before the connection is replaced).
    package func removeAll() {
        statements = [:]
    }
}
