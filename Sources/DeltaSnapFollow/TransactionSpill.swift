import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapStore
import Foundation

/// The rows of one source transaction too large to hold in memory, in a temporary file: the
/// last state of each row by path and id (a later change replaces an earlier one, as in
/// memory), and the rows still waiting for values their update did not send. Read back path
/// by path, in id order, as the records a store imports in one transaction
/// (``DeltaSnapStore/StoreWriter/importStreams(_:recording:)``). The file goes with it.
///
/// A SQLite file because what is needed is a keyed upsert on disk — a row changed twice in
/// one transaction is one record — and SQLite is linked already; a plain append-only file
/// would need an index of its own to replace a row.
///
/// ```swift
/// let spill = try TransactionSpill()
/// try spill.set(record, at: "attempts/alice")
/// try await store.importStreams(spill.streams(), replace: false, recording: position)
/// ```
///
/// `@unchecked Sendable`: one transaction's reader uses it, then hands it to the store's
/// writer, which reads it alone.
final class TransactionSpill: @unchecked Sendable {
    private let directory: String
    private let db: SQLiteConnection
    private let statements: StatementCache
    /// Rows waiting for the store's values, so a `set` skips their table when none wait.
    private var waiting = 0

    /// Where a follower's spills go: its process id names them, so the next follower can
    /// remove what a killed one left (``removeAbandoned()``).
    private static let prefix = "deltasnap-follow-"

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(Self.prefix + "\(getpid())-" + UUID().uuidString).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        db = try SQLiteConnection(path: directory + "/transaction.sqlite")
        statements = StatementCache(db)
        // A scratch file read back once: no journal, no sync, and one transaction for all of it.
        try db.execute("""
            PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA temp_store = FILE;
            CREATE TABLE changes(path TEXT NOT NULL, id TEXT NOT NULL, hidden INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (path, id)) WITHOUT ROWID;
            CREATE TABLE waiting(path TEXT NOT NULL, id TEXT NOT NULL, members BLOB NOT NULL, unchanged BLOB NOT NULL,
                from_path TEXT NOT NULL, from_id TEXT NOT NULL, PRIMARY KEY (path, id)) WITHOUT ROWID;
            BEGIN;
            """)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Removes the spills of followers that are gone (killed while a large transaction was
    /// staged); a running follower's are left alone.
    static func removeAbandoned() {
        let temporary = FileManager.default.temporaryDirectory
        for name in (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? [] where name.hasPrefix(prefix) {
            guard let pid = name.dropFirst(prefix.count).split(separator: "-").first.flatMap({ Int32($0) }) else { continue }
            // kill(pid, 0): ESRCH when no such process is left.
            if kill(pid, 0) != 0 && errno == ESRCH { try? FileManager.default.removeItem(at: temporary.appendingPathComponent(name)) }
        }
    }

    /// `record` is the row's state at `path` now.
    func set(_ record: Record, at path: String) throws {
        try insert(record, at: path, onConflict: "REPLACE")
        if waiting > 0 { try remove(from: "waiting", path: path, id: record.id) }
    }

    /// `record` at `path` unless the transaction changed that row itself (what a `TRUNCATE`
    /// hides, what changed columns rewrite, around the rows the transaction wrote).
    func setIfAbsent(_ record: Record, at path: String) throws {
        try insert(record, at: path, onConflict: "IGNORE")
    }

    private func insert(_ record: Record, at path: String, onConflict: String) throws {
        let insert = try statements("INSERT OR \(onConflict) INTO changes(path, id, hidden, body) VALUES (?, ?, ?, ?)")
        try insert.bind(1, path)
        try insert.bind(2, record.id)
        try insert.bind(3, record.isHidden)
        try insert.bind(4, blob: record.isHidden ? [] : record.bytes)
        try insert.run()
    }

    /// The row's state this transaction left at `path`, if it changed it.
    func record(at path: String, id: String) throws -> Record? {
        let select = try statements("SELECT hidden, body FROM changes WHERE path = ? AND id = ?")
        defer { select.reset() }
        try select.bind(1, path)
        try select.bind(2, id)
        guard try select.step() else { return nil }
        return select.bool(0) ? .tombstone(id: id) : try Record.parse(select.blob(1))
    }

    /// The row waits for the values its update did not send.
    func wait(_ pending: PendingRow) throws {
        try remove(from: "changes", path: pending.row.path, id: pending.row.id)
        let insert = try statements("INSERT OR REPLACE INTO waiting(path, id, members, unchanged, from_path, from_id) VALUES (?, ?, ?, ?, ?, ?)")
        try insert.bind(1, pending.row.path)
        try insert.bind(2, pending.row.id)
        try insert.bind(3, blob: CanonicalJSON.bytes(.object(pending.row.members)))
        try insert.bind(4, blob: CanonicalJSON.bytes(.array(pending.row.unchanged.map(JSONValue.string))))
        try insert.bind(5, pending.from.path)
        try insert.bind(6, pending.from.id)
        try insert.run()
        waiting += 1
    }

    /// The row waiting at `path`, if one is.
    func pending(at path: String, id: String) throws -> PendingRow? {
        guard waiting > 0 else { return nil }
        let select = try statements("SELECT members, unchanged, from_path, from_id FROM waiting WHERE path = ? AND id = ?")
        defer { select.reset() }
        try select.bind(1, path)
        try select.bind(2, id)
        guard try select.step() else { return nil }
        return try Self.pendingRow(path: path, id: id, from: select)
    }

    /// Up to `limit` waiting rows (each is removed once it is `set`).
    func someWaiting(limit: Int) throws -> [PendingRow] {
        guard waiting > 0 else { return [] }
        let select = try statements("SELECT members, unchanged, from_path, from_id, path, id FROM waiting LIMIT ?")
        defer { select.reset() }
        try select.bind(1, limit)
        var rows: [PendingRow] = []
        while try select.step() { rows.append(try Self.pendingRow(path: select.string(4), id: select.string(5), from: select)) }
        return rows
    }

    /// Drops a waiting row that cannot be completed.
    func dropWaiting(at path: String, id: String) throws {
        try remove(from: "waiting", path: path, id: id)
    }

    /// Every row of `collection` (or of its partitions) this transaction wrote or left waiting
    /// becomes a tombstone: a `TRUNCATE` after them.
    func hideAll(in collection: String) throws {
        let inTable = "(path = ?1 OR (path > ?1 || '/' AND path < ?1 || '0'))"
        try run("UPDATE changes SET hidden = 1, body = x'' WHERE \(inTable)", collection)
        try run("INSERT OR REPLACE INTO changes(path, id, hidden, body) SELECT path, id, 1, x'' FROM waiting WHERE \(inTable)", collection)
        try run("DELETE FROM waiting WHERE \(inTable)", collection)
        waiting = Int(try db.scalarInt("SELECT count(*) FROM waiting") ?? 0)
    }

    /// The paths and their records, in path then id order, as ``DeltaSnapStore/StoreWriter/importStreams(_:replace:recording:)``
    /// takes them (each path's records read to their end before the next path is asked for);
    /// then `emptied`, each with no record (a copy's table or partitions that have no row now).
    func streams(then emptied: [String] = []) throws -> @Sendable () throws -> PathRecords? {
        let cursor = try SpillCursor(db.prepare("SELECT path, id, hidden, body FROM changes ORDER BY path, id"), then: emptied)
        return { [self] in
            _ = self  // The file stays until the store has read it.
            if let path = try cursor.nextPath() {
                let records = RecordStream(source: { try cursor.chunk(of: path) }, name: "source transaction")
                records.idsAscend = true  // The spill's key order, which is the stores' too.
                return PathRecords(path: path, records: records)
            }
            guard let path = cursor.nextEmptied() else { return nil }
            let none = RecordStream(records: [], name: "source table")
            none.emptyIsIntended = true
            return PathRecords(path: path, records: none)
        }
    }

    /// Whether the transaction wrote a row at `path`.
    func contains(path: String) throws -> Bool {
        let select = try statements("SELECT 1 FROM changes WHERE path = ? LIMIT 1")
        defer { select.reset() }
        try select.bind(1, path)
        return try select.step()
    }

    private func remove(from table: String, path: String, id: String) throws {
        let delete = try statements("DELETE FROM \(table) WHERE path = ? AND id = ?")
        try delete.bind(1, path)
        try delete.bind(2, id)
        try delete.run()
        if table == "waiting", db.changes > 0 { waiting -= 1 }
    }

    private func run(_ sql: String, _ collection: String) throws {
        let statement = try statements(sql)
        try statement.bind(1, collection)
        try statement.run()
    }

    private static func pendingRow(path: String, id: String, from select: SQLiteStatement) throws -> PendingRow {
        guard case .object(let members)? = try? JSONReader(bytes: select.blob(0)).readValue(),
              case .array(let unchanged)? = try? JSONReader(bytes: select.blob(1)).readValue()
        else { throw FollowError.source("a staged row of \(path) cannot be read back") }
        let names = unchanged.compactMap { if case .string(let name) = $0 { name } else { nil } }
        return PendingRow(row: TableShape.Row(path: path, id: id, members: members, unchanged: names), from: (select.string(2), select.string(3)))
    }
}

/// One pass over a spill's rows in path order, cut into one record stream per path.
private final class SpillCursor: @unchecked Sendable {
    private let select: SQLiteStatement
    /// The row read but not yet handed out: the first of the next path.
    private var ahead: (path: String, line: [UInt8])?
    private var finished = false
    private var emptied: IndexingIterator<[String]>

    init(_ select: SQLiteStatement, then emptied: [String]) {
        self.select = select
        self.emptied = emptied.makeIterator()
    }

    /// The next path handed out empty, once the rows are all out.
    func nextEmptied() -> String? {
        emptied.next()
    }

    /// The path of the next row not handed out; nil at the end.
    func nextPath() throws -> String? {
        if ahead == nil { try advance() }
        return ahead?.path
    }

    /// The next NDJSON chunk of `path`'s records; nil once they are all out.
    func chunk(of path: String) throws -> [UInt8]? {
        var chunk: [UInt8] = []
        while chunk.count < ChunkSources.chunkSize {
            if ahead == nil { try advance() }
            guard let row = ahead, row.path == path else { break }
            chunk += row.line
            ahead = nil
        }
        return chunk.isEmpty ? nil : chunk
    }

    private func advance() throws {
        guard !finished else { return }
        guard try select.step() else {
            finished = true
            select.reset()
            return
        }
        var line = select.bool(2) ? Record.tombstone(id: select.string(1)).bytes : select.blob(3)
        line.append(UInt8(ascii: "\n"))
        ahead = (select.string(0), line)
    }
}
