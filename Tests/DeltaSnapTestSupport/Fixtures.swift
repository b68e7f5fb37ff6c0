import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapSynthetic
import Foundation

/// Builders for test data.
package enum Fixtures {
    /// NDJSON text of synthetic records `range`.
    /// The access rules of a study-set app (PROTOCOL.md §10): public countries, one attempts
    /// partition per user, shared sets by membership.
    package static let studyAppRules = """
        collections:
          countries: { read: public, write: admin }
          attempts:  { partitioned: true, read: owner,  write: owner }
          sets:      { partitioned: true, read: member, write: member }
        memberships: members
        """

    package static func ndjson(_ range: Range<Int>, revision: Int = 0, seed: UInt64 = 1) -> String {
        let generator = SyntheticRecords(seed: seed)
        var out: [UInt8] = []
        for index in range {
            out.append(contentsOf: generator.json(index: index, revision: revision))
            out.append(UInt8(ascii: "\n"))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses one record from JSON text.
    package static func record(_ json: String) throws -> Record {
        try Record(json: Array(json.utf8))
    }

    /// Imports NDJSON text through the library (no child process).
    @discardableResult
    package static func importText(_ text: String, into store: SQLiteDatabase, collection: String, replace: Bool = false) throws -> WriteResult {
        try Importer(store: store, collection: collection, replace: replace)
            .run(source: ChunkSources.bytes(Array(text.utf8)), name: "test")
    }

    /// The store's `export` output as text, read through one connection.
    package static func export(_ store: SQLiteDatabase, _ collection: String) throws -> String {
        try store.read { reader in
            guard try reader.head(of: collection) != nil else { throw StoreError.unknownCollection(collection) }
            var out = ""
            try reader.forEachVisibleRecord(in: collection) { out += String(decoding: $0, as: UTF8.self) + "\n" }
            return out
        }
    }

    /// Bakes `collection` of the SQLite store at `path` into `directory`, as `deltasnap bake` does.
    @discardableResult
    package static func bake(_ path: String, _ collection: String, into directory: String) async throws -> ManifestEntry {
        let store = try SQLiteCollectionStore(path: path, readOnly: true)
        return try await store.bake(collection, into: directory)
    }

    /// A replica file's records as `deltasnap dump` prints them (NDJSON sorted by id).
    package static func dumpReplica(_ path: String) throws -> String {
        var out: [UInt8] = []
        try ReplicaDump.dump(path: path) { out.append(contentsOf: $0) }
        return String(decoding: out, as: UTF8.self)
    }

    /// A store with `count` records of `items` in `dir` (`s.sqlite`), its snapshot
    /// (`items.snapshot`) and the bundled replica baked from it (`items.replica`).
    @discardableResult
    package static func bakedReplica(in dir: TemporaryDirectory, count: Int = 200) async throws -> SQLiteDatabase {
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try importText(ndjson(0..<count), into: store, collection: "items")
        try await bake(store.path, "items", into: dir.path)
        try BundledReplica.bake(snapshot: dir.file("items.snapshot"), collection: "items", to: dir.file("items.replica"))
        return store
    }
}
