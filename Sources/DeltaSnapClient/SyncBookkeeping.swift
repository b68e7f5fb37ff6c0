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

    static func path(for destination: String) -> String { destination + "-sync" }

    /// Opens (creating) the bookkeeping of `storage`'s borrowed bundle.
    static func open(for storage: ReplicaStorage) throws -> SyncBookkeeping {
        guard let destination = storage.borrowed?.destination else { preconditionFailure("bookkeeping of a replica that is not borrowed") }
        let db = try SQLiteConnection(path: path(for: destination))
        try db.execute("CREATE TABLE IF NOT EXISTS state(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID")
        let bookkeeping = SyncBookkeeping(db: db)
        try bookkeeping.write([bundleKey: try bundleToken(of: storage)])
        return bookkeeping
    }

    /// The bookkeeping of `storage`'s bundle when there is some for this very bundle; a
    /// file written against another bundle is removed.
    static func openIfCurrent(for storage: ReplicaStorage) throws -> SyncBookkeeping? {
        guard let destination = storage.borrowed?.destination, FileManager.default.fileExists(atPath: path(for: destination)) else { return nil }
        let db = try SQLiteConnection(path: path(for: destination))
        let bookkeeping = SyncBookkeeping(db: db)
        let rows = (try? bookkeeping.allRows()) ?? [:]
        guard let tie = rows[bundleKey] ?? nil, tie == (try bundleToken(of: storage)) else {
            remove(for: destination)
            return nil
        }
        return bookkeeping
    }

    static func remove(for destination: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path(for: destination) + suffix) }
    }

    private static func bundleToken(of storage: ReplicaStorage) throws -> String? {
        try ReplicaStorage.stateValues(in: storage.db)["token"]
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

    /// Records `rows` in one transaction (nil values as removals).
    func write(_ rows: [String: String?]) throws {
        try db.transaction(.immediate) {
            let upsert = try db.prepare("INSERT INTO state(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
            for (key, value) in rows {
                try upsert.bind(1, key)
                if let value { try upsert.bind(2, value) } else { try upsert.bindNull(2) }
                try upsert.run()
            }
        }
    }
}
