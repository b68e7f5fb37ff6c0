import CSQLite

/// One connection to an SQLite database file.
///
/// A thin layer over the C API rather than GRDB: the hot loops (import, apply) run
/// ~1.8× faster on raw prepared statements, and the client stays dependency-free for
/// iOS apps (see `docs/ARCHITECTURE.md` for the measurement). Not thread-safe: use one
/// connection per task or thread.
///
/// ```swift
/// let db = try SQLiteConnection(path: "store.sqlite")
/// try db.execute("CREATE TABLE IF NOT EXISTS t(x)")
/// try db.transaction(.immediate) {
///     let insert = try db.prepare("INSERT INTO t(x) VALUES (?)")
///     try insert.bind(1, 42); try insert.run()
/// }
/// ```
package final class SQLiteConnection {
    let handle: OpaquePointer
    package let path: String
    /// What this connection's statements have read so far (``readStatistics``).
    let reads = ReadCounter()

    /// Process-wide settings, made once before the first connection opens: SQLite reads
    /// them only then.
    private static let configured: Void = {
        // A mutex on every allocation, for statistics nobody reads: 5–8% of a partitioned import.
        _ = deltasnap_sqlite3_disable_memory_statistics()
    }()

    package enum TransactionKind: String {
        case deferred = "DEFERRED"
        /// Takes the write lock at BEGIN: concurrent writers queue up instead of failing later.
        case immediate = "IMMEDIATE"
    }

    /// Opens (and by default creates) the database at `path`, with a busy timeout so
    /// concurrent writers wait for each other.
    package init(path: String, readOnly: Bool = false, create: Bool = true, busyTimeoutMilliseconds: Int32 = 30_000) throws {
        _ = Self.configured
        var db: OpaquePointer?
        var flags = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        flags |= SQLITE_OPEN_NOMUTEX
        let status = sqlite3_open_v2(path, &db, flags, nil)
        guard status == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(db)
            throw SQLiteError(code: status, message: "\(path): \(message)")
        }
        handle = db
        self.path = path
        sqlite3_busy_timeout(db, busyTimeoutMilliseconds)
        sqlite3_extended_result_codes(db, 0)
    }

    deinit {
        sqlite3_close_v2(handle)
    }

    /// Runs one or more statements that return no rows.
    package func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if status != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? lastErrorMessage
            sqlite3_free(errorMessage)
            throw SQLiteError(code: status, message: message, sql: sql)
        }
    }

    /// Compiles `sql` into a reusable statement.
    package func prepare(_ sql: String) throws -> SQLiteStatement {
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw SQLiteError(code: status, message: lastErrorMessage, sql: sql) }
        return SQLiteStatement(handle: statement, connection: self, sql: sql)
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    package func transaction<T>(_ kind: TransactionKind = .deferred, _ body: () throws -> T) throws -> T {
        try execute("BEGIN \(kind.rawValue)")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// The first column of the first row of `sql`, as an integer.
    package func scalarInt(_ sql: String) throws -> Int64? {
        let statement = try prepare(sql)
        guard try statement.step() else { return nil }
        return statement.isNull(0) ? nil : statement.int64(0)
    }

    /// Prepared statements of this connection not yet finalised. A connection handed to
    /// another thread must have none left that its previous user could still finalise.
    package var liveStatementCount: Int {
        var count = 0
        var statement = sqlite3_next_stmt(handle, nil)
        while let current = statement {
            count += 1
            statement = sqlite3_next_stmt(handle, current)
        }
        return count
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    package var changes: Int { Int(sqlite3_changes(handle)) }

    /// The rowid of the last row this connection inserted.
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    var lastErrorMessage: String { String(cString: sqlite3_errmsg(handle)) }

    /// How much this connection has read since it opened (or since the last
    /// ``resetReadStatistics()``): for tests that pin a cost by counting work instead of
    /// timing it (a one-record delta must not read the whole replica).
    ///
    /// ```swift
    /// db.resetReadStatistics()
    /// try apply(delta)
    /// #expect(db.readStatistics.fullScanSteps < 100)
    /// ```
    package var readStatistics: ReadStatistics {
        var statistics = reads.totals
        // Statements still running (or cached, not reset since) count too.
        var statement = sqlite3_next_stmt(handle, nil)
        while let current = statement {
            statistics.virtualMachineSteps += Int(sqlite3_stmt_status(current, SQLITE_STMTSTATUS_VM_STEP, 0))
            statistics.fullScanSteps += Int(sqlite3_stmt_status(current, SQLITE_STMTSTATUS_FULLSCAN_STEP, 0))
            statement = sqlite3_next_stmt(handle, current)
        }
        // Pages fetched through the pager, whatever ran: also `execute`'s statements, which
        // are finalized inside sqlite3_exec before their own counters can be read.
        var current: Int32 = 0
        var highwater: Int32 = 0
        sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_HIT, &current, &highwater, 0)
        statistics.pagesRead = Int(current)
        sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_MISS, &current, &highwater, 0)
        statistics.pagesRead += Int(current)
        return statistics
    }

    /// Starts ``readStatistics`` from zero.
    package func resetReadStatistics() {
        reads.totals = ReadStatistics()
        var statement = sqlite3_next_stmt(handle, nil)
        while let current = statement {
            _ = sqlite3_stmt_status(current, SQLITE_STMTSTATUS_VM_STEP, 1)
            _ = sqlite3_stmt_status(current, SQLITE_STMTSTATUS_FULLSCAN_STEP, 1)
            statement = sqlite3_next_stmt(handle, current)
        }
        var current: Int32 = 0
        var highwater: Int32 = 0
        sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_HIT, &current, &highwater, 1)
        sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_MISS, &current, &highwater, 1)
    }

    /// The SQLite library version, e.g. "3.40.1".
    package static var libraryVersion: String { String(cString: sqlite3_libversion()) }
}


/// Work a connection's statements did (``SQLiteConnection/readStatistics``).
package struct ReadStatistics: Sendable, Equatable {
    /// Virtual machine instructions run (SQLite's `SQLITE_STMTSTATUS_VM_STEP`): grows with
    /// every row a statement visits, whichever way it reaches it.
    package var virtualMachineSteps = 0
    /// Rows visited by full table or index scans (`SQLITE_STMTSTATUS_FULLSCAN_STEP`).
    package var fullScanSteps = 0
    /// Pages fetched from the page cache or the file (`SQLITE_DBSTATUS_CACHE_HIT` + `_MISS`).
    package var pagesRead = 0

    package init() {}
}

/// The counts of finalized statements, shared with them: a statement may outlive the
/// connection object (SQLite closes it once the last one is finalized).
final class ReadCounter {
    var totals = ReadStatistics()

    /// Adds (and clears) `statement`'s own counters.
    func collect(_ statement: OpaquePointer) {
        totals.virtualMachineSteps += Int(sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_VM_STEP, 1))
        totals.fullScanSteps += Int(sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_FULLSCAN_STEP, 1))
    }
}
