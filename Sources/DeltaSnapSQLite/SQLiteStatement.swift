import CSQLite

/// A prepared statement: bind parameters (1-based), step through rows, read columns (0-based).
///
/// Reuse a statement in hot loops: ``reset()`` is done for you by ``run()`` and by
/// ``step()`` once the rows are exhausted.
package final class SQLiteStatement {
    let handle: OpaquePointer
    unowned let connection: SQLiteConnection
    package let sql: String
    /// The connection's read counter, which this statement's counts join when it is finalized.
    private let reads: ReadCounter

    /// SQLite copies bound text and blobs (SQLITE_TRANSIENT, which does not import into Swift).
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(handle: OpaquePointer, connection: SQLiteConnection, sql: String) {
        self.handle = handle
        self.connection = connection
        self.sql = sql
        reads = connection.reads
    }

    deinit {
        reads.collect(handle)
        sqlite3_finalize(handle)
    }

    private func check(_ status: Int32) throws {
        guard status == SQLITE_OK else { throw SQLiteError(code: status, message: connection.lastErrorMessage, sql: sql) }
    }

    package func bind(_ index: Int32, _ value: Int64) throws { try check(sqlite3_bind_int64(handle, index, value)) }
    package func bind(_ index: Int32, _ value: Int) throws { try bind(index, Int64(value)) }
    package func bind(_ index: Int32, _ value: UInt64) throws { try bind(index, Int64(bitPattern: value)) }
    package func bind(_ index: Int32, _ value: Bool) throws { try bind(index, Int64(value ? 1 : 0)) }
    package func bind(_ index: Int32, _ value: Double) throws { try check(sqlite3_bind_double(handle, index, value)) }
    package func bind(_ index: Int32, _ value: String) throws {
        try check(sqlite3_bind_text(handle, index, value, -1, Self.transient))
    }
    package func bind(_ index: Int32, blob: [UInt8]) throws {
        try blob.withUnsafeBytes { raw in
            // A zero-length blob still needs a non-null pointer to be a blob rather than NULL.
            try check(sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), Self.transient))
        }
    }
    package func bindNull(_ index: Int32) throws { try check(sqlite3_bind_null(handle, index)) }

    /// Advances to the next row: true when a row is available, false when done (and reset).
    @discardableResult
    package func step() throws -> Bool {
        let status = sqlite3_step(handle)
        switch status {
        case SQLITE_ROW: return true
        case SQLITE_DONE:
            sqlite3_reset(handle)
            return false
        default:
            let error = SQLiteError(code: status, message: connection.lastErrorMessage, sql: sql)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    package func run() throws {
        while try step() {}
    }

    /// Resets the statement so it can run again (bindings are kept).
    package func reset() { sqlite3_reset(handle) }

    package func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    package func uint64(_ column: Int32) -> UInt64 { UInt64(bitPattern: sqlite3_column_int64(handle, column)) }
    package func bool(_ column: Int32) -> Bool { sqlite3_column_int64(handle, column) != 0 }
    package func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    package func string(_ column: Int32) -> String {
        guard let text = sqlite3_column_text(handle, column) else { return "" }
        return String(cString: text)
    }
    package func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let pointer = sqlite3_column_blob(handle, column) else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: pointer, count: count))
    }
    /// Calls `body` with the column's bytes without copying them; valid only inside `body`.
    package func withBlob<T>(_ column: Int32, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let count = Int(sqlite3_column_bytes(handle, column))
        let pointer = sqlite3_column_blob(handle, column)
        return try body(UnsafeRawBufferPointer(start: count > 0 ? pointer : nil, count: count))
    }
}
