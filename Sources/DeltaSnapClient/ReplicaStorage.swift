import DeltaSnapCore
import DeltaSnapSQLite
import Foundation

/// The replica's SQLite file: the records and the ``ReplicaState``, changed together in
/// one transaction so a crash leaves the old state or the new one.
final class ReplicaStorage {
    let db: SQLiteConnection

    init(path: String) throws {
        db = try SQLiteConnection(path: path)
        try db.execute("""
            PRAGMA journal_mode=WAL;
            PRAGMA synchronous=NORMAL;
            CREATE TABLE IF NOT EXISTS records(id TEXT PRIMARY KEY, hash INTEGER NOT NULL, body BLOB NOT NULL) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS state(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
            """)
    }

    // MARK: - State

    func loadState() throws -> ReplicaState {
        let statement = try db.prepare("SELECT key, value FROM state")
        var values: [String: String] = [:]
        while try statement.step() { values[statement.string(0)] = statement.string(1) }
        func date(_ key: String) -> Date? { values[key].flatMap(Double.init).map(Date.init(timeIntervalSince1970:)) }
        return ReplicaState(
            etag: values["etag"], lastModified: values["lastModified"], token: values["token"],
            checksum: values["checksum"].flatMap(StateChecksum.init) ?? .empty,
            count: values["count"].flatMap(Int.init) ?? 0,
            lastSuccessfulSync: date("lastSuccessfulSync"), lastError: values["lastError"],
            failingSince: date("failingSince"), consecutiveFailures: values["consecutiveFailures"].flatMap(Int.init) ?? 0,
            notBefore: date("notBefore"))
    }

    /// Writes `state` (inside the caller's transaction when there is one).
    func save(_ state: ReplicaState) throws {
        func text(_ date: Date?) -> String? { date.map { String($0.timeIntervalSince1970) } }
        let values: [String: String?] = [
            "etag": state.etag, "lastModified": state.lastModified, "token": state.token,
            "checksum": state.checksum.description, "count": String(state.count),
            "lastSuccessfulSync": text(state.lastSuccessfulSync), "lastError": state.lastError,
            "failingSince": text(state.failingSince), "consecutiveFailures": String(state.consecutiveFailures),
            "notBefore": text(state.notBefore),
        ]
        let upsert = try db.prepare("INSERT INTO state(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
        let delete = try db.prepare("DELETE FROM state WHERE key = ?")
        for (key, value) in values {
            if let value {
                try upsert.bind(1, key)
                try upsert.bind(2, value)
                try upsert.run()
            } else {
                try delete.bind(1, key)
                try delete.run()
            }
        }
    }

    // MARK: - Reads

    func record(id: String) throws -> [UInt8]? {
        let statement = try db.prepare("SELECT body FROM records WHERE id = ?")
        try statement.bind(1, id)
        guard try statement.step() else { return nil }
        defer { statement.reset() }
        return statement.blob(0)
    }

    func forEachRecord(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let statement = try db.prepare("SELECT body FROM records ORDER BY id")
        while try statement.step() { try statement.withBlob(0, body) }
    }

    /// Count and checksum recomputed from every record (O(n)), for verification.
    func recomputed() throws -> (count: Int, checksum: StateChecksum) {
        var checksum = StateChecksum.empty
        var count = 0
        try forEachRecord { bytes in
            checksum.add(hash: XXH64.hash(bytes))
            count += 1
        }
        return (count, checksum)
    }
}
