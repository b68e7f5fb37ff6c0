import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapSynthetic
import Foundation

/// Builders for test data.
public enum Fixtures {
    /// NDJSON text of synthetic records `range`.
    /// The access rules of a study-set app (PROTOCOL.md §10): public countries, one attempts
    /// partition per user, shared sets by membership.
    public static let studyAppRules = """
        collections:
          countries: { read: public, write: admin }
          attempts:  { partitioned: true, read: owner,  write: owner }
          sets:      { partitioned: true, read: member, write: member }
        memberships: members
        """

    public static func ndjson(_ range: Range<Int>, revision: Int = 0, seed: UInt64 = 1) -> String {
        let generator = SyntheticRecords(seed: seed)
        var out: [UInt8] = []
        for index in range {
            out.append(contentsOf: generator.json(index: index, revision: revision))
            out.append(UInt8(ascii: "\n"))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses one record from JSON text.
    public static func record(_ json: String) throws -> Record {
        try Record(json: Array(json.utf8))
    }

    /// Imports NDJSON text through the library (no child process).
    @discardableResult
    public static func importText(_ text: String, into store: SQLiteDatabase, collection: String, replace: Bool = false) throws -> WriteResult {
        try Importer(store: store, collection: collection, replace: replace)
            .run(source: ChunkSources.bytes(Array(text.utf8)), name: "test")
    }

    /// The store's `export` output as text, read through one connection.
    public static func export(_ store: SQLiteDatabase, _ collection: String) throws -> String {
        try store.read { reader in
            guard try reader.head(of: collection) != nil else { throw StoreError.unknownCollection(collection) }
            var out = ""
            try reader.forEachVisibleRecord(in: collection) { out += String(decoding: $0, as: UTF8.self) + "\n" }
            return out
        }
    }

    /// Bakes `collection` of the SQLite store at `path` into `directory`, as `deltasnap bake` does.
    @discardableResult
    public static func bake(_ path: String, _ collection: String, into directory: String) async throws -> ManifestEntry {
        let store = try SQLiteCollectionStore(path: path, readOnly: true)
        return try await store.bake(collection, into: directory)
    }
}
