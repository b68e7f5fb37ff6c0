import DeltaSnapCore
import DeltaSnapSQLite

/// Which rows of a replica file a ``ReplicaStorage`` reads and writes: a file holds one
/// collection (scope `""`), or a user's whole view, one scope per partition (`sets/8271`),
/// every table keyed by its `collection` column. The SQL of a storage is written for its
/// one scope, so each statement is prepared once and binds no extra value.
///
/// Scopes are `""` or valid collection paths (letters, digits, `._:@/-`), so they are
/// written into SQL as literals without any quoting problem.
struct ReplicaScope: Sendable, Equatable {
    /// `""`, or the partition (or collection) path of a view's member; for a scope over
    /// every partition of a collection (``partitions(of:in:)``), `NAME/`.
    let collection: String
    /// Whether this scope spans every partition `NAME/*` (read-only: queries).
    let spansPartitions: Bool
    /// Whether the tables have the `collection` column: not in a bundled replica baked by a
    /// release before views, read in place (read-only, so it cannot be migrated).
    let hasColumn: Bool
    /// Whether the primary keys leave the column out (files made before views hold one
    /// collection only, so `id` alone is unique there).
    let legacyKeys: Bool

    init(collection: String, hasColumn: Bool, legacyKeys: Bool, spansPartitions: Bool = false) {
        self.collection = collection
        self.hasColumn = hasColumn
        self.legacyKeys = legacyKeys
        self.spansPartitions = spansPartitions
    }

    /// Selects this scope's rows; `alias` qualifies the column (`r` in `records r`).
    func condition(_ alias: String? = nil) -> String {
        guard hasColumn else { return "1" }
        let column = "\(alias.map { $0 + "." } ?? "")collection"
        // `NAME/` up to `NAME0` ('0' follows '/'): every `NAME/KEY`, on the primary key's order.
        return spansPartitions ? "\(column) >= '\(collection)' AND \(column) < '\(collection.dropLast())0'" : "\(column) = '\(collection)'"
    }

    /// Joins two tables' rows of the same record: same id, and same scope when the file has several.
    func sameRecord(_ left: String, _ right: String) -> String {
        hasColumn ? "\(left).collection = \(right).collection AND \(left).id = \(right).id" : "\(left).id = \(right).id"
    }

    /// The scope of every partition of collection `name` in the file `db`: queries over a
    /// user's whole view of a collection.
    static func partitions(of name: String, in db: SQLiteConnection) throws -> ReplicaScope {
        precondition(CollectionName.isValid(name), "a collection name")
        let file = try of("", in: db)
        return ReplicaScope(collection: name + "/", hasColumn: file.hasColumn, legacyKeys: file.legacyKeys, spansPartitions: true)
    }

    /// The SQL literal of the scope, for inserts.
    var literal: String { "'\(collection)'" }

    /// The conflict target of an upsert on `column` (`id`, `key`).
    func key(_ column: String) -> String { legacyKeys ? column : "collection, \(column)" }

    /// The scope of `collection` in the file `db`, migrating a file from before views.
    static func of(_ collection: String, in db: SQLiteConnection) throws -> ReplicaScope {
        precondition(collection.isEmpty || CollectionPath.isValid(collection), "a scope is \"\" or a collection path")
        let hasColumn = try db.scalarInt("SELECT count(*) FROM pragma_table_info('records') WHERE name = 'collection'") == 1
        let legacyKeys = try db.scalarInt("SELECT count(*) FROM pragma_table_info('records') WHERE pk > 0") == 1
        return ReplicaScope(collection: collection, hasColumn: hasColumn, legacyKeys: legacyKeys)
    }

    /// The tables of a replica file made by this release.
    static let schema = """
        CREATE TABLE IF NOT EXISTS records(
            collection TEXT NOT NULL DEFAULT '', id TEXT NOT NULL, hash INTEGER NOT NULL, body BLOB NOT NULL,
            PRIMARY KEY(collection, id)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS state(
            collection TEXT NOT NULL DEFAULT '', key TEXT NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY(collection, key)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS pending(
            collection TEXT NOT NULL DEFAULT '',
            seq INTEGER NOT NULL,
            op TEXT NOT NULL,
            id TEXT NOT NULL,
            value BLOB,
            acked INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            base TEXT,
            PRIMARY KEY(collection, seq)
        );
        CREATE INDEX IF NOT EXISTS pending_by_id ON pending(collection, id, seq);
        CREATE TABLE IF NOT EXISTS overlay(
            collection TEXT NOT NULL DEFAULT '', id TEXT NOT NULL, body BLOB,
            PRIMARY KEY(collection, id)) WITHOUT ROWID;
        """

    /// Gives a file from before views the columns this release's statements name (its
    /// primary keys stay: it holds one collection). Under the write lock: an app and its
    /// extension may open the same old replica at once.
    static func migrate(_ db: SQLiteConnection) throws {
        func lacks(_ column: String, in table: String) throws -> Bool {
            try db.scalarInt("SELECT count(*) FROM pragma_table_info('\(table)') WHERE name = '\(column)'") == 0
        }
        var missing: [(table: String, column: String)] = []
        for table in ["records", "state", "pending", "overlay"] where try lacks("collection", in: table) {
            missing.append((table, "collection TEXT NOT NULL DEFAULT ''"))
        }
        if try lacks("base", in: "pending") { missing.append(("pending", "base TEXT")) }
        guard !missing.isEmpty else { return }
        try db.transaction(.immediate) {
            for (table, column) in missing where try lacks(String(column.prefix { $0 != " " }), in: table) {
                try db.execute("ALTER TABLE \(table) ADD COLUMN \(column)")
            }
        }
    }
}
