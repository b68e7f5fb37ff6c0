import DeltaSnapSQLite
import Foundation

/// The sync bookkeeping of a bundled replica that is still read in place: validators a
/// `304` refreshed, failures and backoff, the server's wait, the binding — everything a sync
/// records that is not data. It lives in a small SQLite file beside the replica's path
/// (`PATH-sync`), so a first sync that changes no data (a `304`, a dead server) never copies
/// the bundle; the first sync that does change data copies (or clones) the bundle and moves
/// these rows into it.
///
/// The file names the bundle token it was written against: an app update that ships a newer
/// bundle makes the old bookkeeping stale, and it is dropped.
struct SyncBookkeeping {
    /// The row that ties the file to the bundle it was written against.
    private static let bundleKey = "bundleToken"
    private let db: SQLiteConnection
    /// The bundle token written with every row set (nil for a file only read).
    private var tie: String?? = nil

    static func path(for destination: String) -> String { destination + "-sync" }

    /// Opens (creating) the bookkeeping of the replica to be at `destination`, read from
    /// the bundle whose token is `bundleToken`.
    static func open(destination: String, bundleToken: String?) throws -> SyncBookkeeping {
        let db = try SQLiteConnection(path: path(for: destination))
        try db.execute("CREATE TABLE IF NOT EXISTS state(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID")
        var bookkeeping = SyncBookkeeping(db: db)
        bookkeeping.tie = .some(bundleToken)
        return bookkeeping
    }

    /// The bookkeeping beside `destination` when there is some for the bundle whose token
    /// is `bundleToken`; a file written against another bundle is removed.
    static func openIfCurrent(destination: String, bundleToken: String?) throws -> SyncBookkeeping? {
        guard FileManager.default.fileExists(atPath: path(for: destination)) else { return nil }
        let bookkeeping = SyncBookkeeping(db: try SQLiteConnection(path: path(for: destination)))
        let rows = (try? bookkeeping.allRows()) ?? [:]
        guard let tie = rows[bundleKey] ?? nil, tie == bundleToken else {
            remove(for: destination)
            return nil
        }
        return bookkeeping
    }

    static func remove(for destination: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path(for: destination) + suffix) }
    }

    /// The state rows recorded (nil: the row was removed), without the bundle tie.
    func values() throws -> [String: String?] {
        var rows = try allRows()
        rows[Self.bundleKey] = nil
        return rows
    }

    private func allRows() throws -> [String: String?] {
        let statement = try db.prepare("SELECT key, value FROM state")
        var rows: [String: String?] = [:]
        while try statement.step() { rows[statement.string(0)] = .some(statement.isNull(1) ? nil : statement.string(1)) }
        return rows
    }

    /// Records `rows` in one transaction (nil values as removals), with the bundle tie of
    /// a file opened for writing.
    func write(_ rows: [String: String?]) throws {
        var rows = rows
        if let tie { rows[Self.bundleKey] = .some(tie) }
        // Removals are kept as NULL, so they can be replayed onto the bundle's rows later.
        let upsert = try db.prepare("INSERT INTO state(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
        try db.transaction(.immediate) {
            for (key, value) in rows {
                try upsert.bind(1, key)
                if let value { try upsert.bind(2, value) } else { try upsert.bindNull(2) }
                try upsert.run()
            }
        }
    }
}
