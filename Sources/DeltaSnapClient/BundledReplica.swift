import DeltaSnapCore
import DeltaSnapSQLite
import Foundation

/// A ready replica file (`NAME.replica`) an app bundles instead of, or next to, the gzip
/// snapshot: the client's own SQLite schema with the records and their verified state, so a
/// first start opens it in place instead of parsing every record. `deltasnap bake
/// --replica` writes it; ``DeltaSnapReplica`` takes either file as `bundledSnapshot`.
///
/// ```swift
/// let summary = try BundledReplica.bake(snapshot: "Snapshots/countries.snapshot",
///                                        collection: "countries", to: "Snapshots/countries.replica")
/// try BundledReplica.inspect("Snapshots/countries.replica").verified   // true
/// ```
public enum BundledReplica {
    /// What a bundled replica holds, from its state table (and, by ``inspect(_:)``, checked).
    public struct Summary: Sendable, Equatable {
        public var collection: String
        public var token: String
        public var lastModified: String?
        public var count: Int
        public var checksum: StateChecksum
        /// Count and checksum recomputed from every record equal the stored ones.
        public var verified: Bool
        /// The collection URL a replica that has synced is bound to (nil for a fresh bundle).
        public var server: String? = nil
    }

    /// Why a bundled replica cannot be used.
    public struct Unusable: Error, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String { "\(path): \(reason)" }
    }

    /// Whether the replica at `path` is still read in place from a bundled `.replica`: its own
    /// file does not exist yet (the first data change copies the bundle there), only its sync
    /// bookkeeping beside it. Opened without that bundle, an empty replica would start in its
    /// place: the `deltasnap` verbs refuse instead (``ReadInPlace``).
    ///
    /// ```swift
    /// if BundledReplica.isReadInPlace("phone.sqlite") { /* open it with its bundle */ }
    /// ```
    public static func isReadInPlace(_ path: String) -> Bool {
        let files = FileManager.default
        return !files.fileExists(atPath: path) && files.fileExists(atPath: SyncBookkeeping.path(for: path))
    }

    /// A replica still read in place from its bundled `.replica`, opened without that bundle.
    public struct ReadInPlace: Error, Equatable, CustomStringConvertible {
        public var path: String

        public init(path: String) {
            self.path = path
        }

        public var description: String {
            "\(path): does not exist (a replica started from a bundled .replica is read in place until its data changes: pass that file as --snapshot)"
        }

        /// Throws when `path` is read in place (``isReadInPlace(_:)``).
        public static func check(_ path: String) throws(ReadInPlace) {
            if isReadInPlace(path) { throw ReadInPlace(path: path) }
        }
    }

    /// Whether the file at `path` is an SQLite file (a replica) rather than a gzip snapshot.
    public static func isReplica(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        let magic = (try? handle.read(upToCount: 16)) ?? Data()
        return magic == Data("SQLite format 3\0".utf8)
    }

    /// Builds the replica of the full snapshot at `snapshot` into `path` (replaced
    /// atomically). Deterministic: the same snapshot gives the same bytes with the same
    /// SQLite version, records inserted in id order and the file vacuumed, in rollback
    /// journal mode so it can be read in place from a read-only bundle.
    @discardableResult
    public static func bake(snapshot: String, collection: String, to path: String) throws -> Summary {
        let temporary = path + ".baking"
        for stale in [temporary, temporary + "-wal", temporary + "-shm"] where FileManager.default.fileExists(atPath: stale) {
            try FileManager.default.removeItem(atPath: stale)
        }
        do {
            let storage = try ReplicaStorage(path: temporary)
            let reader = BodyReader(nextChunk: try ChunkSources.gunzip(try ChunkSources.file(at: snapshot)))
            let (_, state) = try BodyApplier(storage: storage, collection: collection).apply(reader, state: try storage.loadState(), etag: nil, lastModified: nil)
            guard state.hasData else { throw Unusable(path: snapshot, reason: "the snapshot holds no data") }
            try storage.writeTransaction {
                try storage.setValue(collection, for: Self.collectionKey)
                // Its references are indexed; what a device must fetch is for it to settle.
                try storage.db.execute("DELETE FROM attachment_changes")
            }
            try storage.db.execute("PRAGMA journal_mode=DELETE; VACUUM;")
        }
        let summary = try inspect(temporary)
        guard summary.verified else { throw Unusable(path: path, reason: "does not verify after baking") }
        guard rename(temporary, path) == 0 else { throw Unusable(path: path, reason: "cannot be written (errno \(errno))") }
        return summary
    }

    /// Reads a bundled replica's state and recomputes its count and checksum (O(records)).
    public static func inspect(_ path: String) throws -> Summary {
        guard isReplica(path) else { throw Unusable(path: path, reason: "is not a replica file (SQLite)") }
        let storage = try ReplicaStorage(borrowing: path, copyingTo: path)
        var summary = try summary(of: storage, path: path)
        let recomputed = try storage.recomputed()
        summary.verified = recomputed.count == summary.count && recomputed.checksum == summary.checksum
        return summary
    }

    /// The state of a replica file, checked to be a usable bundle: it names its collection
    /// and holds a verified state (count, checksum, token). O(1): the records are not read.
    static func summary(of storage: ReplicaStorage, path: String) throws -> Summary {
        let state: ReplicaState
        let collection: String?
        do {
            state = try storage.loadState()
            collection = try storage.value(for: collectionKey)
        } catch {
            throw Unusable(path: path, reason: "is not a DeltaSnap replica (\(error))")
        }
        guard let collection else { throw Unusable(path: path, reason: "names no collection (not made by `deltasnap bake --replica`)") }
        guard state.hasData, let token = state.token else { throw Unusable(path: path, reason: "holds no data") }
        return Summary(
            collection: collection, token: token, lastModified: state.lastModified, count: state.count,
            checksum: state.checksum, verified: false, server: state.server)
    }

    static let collectionKey = "collection"
}
