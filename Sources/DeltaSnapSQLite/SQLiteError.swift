/// An error reported by SQLite, with what a user needs to act on it.
package struct SQLiteError: Error, Equatable, Sendable, CustomStringConvertible {
    /// SQLite's primary result code (e.g. 5 for SQLITE_BUSY).
    package var code: Int32
    package var message: String
    /// The statement that failed, when there was one.
    package var sql: String?

    package init(code: Int32, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    package var description: String {
        if let sql { return "SQLite error \(code): \(message) (in: \(sql))" }
        return "SQLite error \(code): \(message)"
    }
}
