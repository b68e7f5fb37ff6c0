import DeltaSnapCore
import Foundation

/// Prints a replica's records without opening it as a ``DeltaSnapReplica`` (no collection
/// or URL needed): `deltasnap dump`.
public enum ReplicaDump {
    /// Streams the records as NDJSON sorted by id, in chunks of about 64 KiB.
    public static func dump(path: String, write: @escaping ([UInt8]) throws -> Void) throws {
        try dump(try ReplicaStorage(path: path), write: write)
    }

    /// Dumps the replica at `path` — or, while it has only been read from its bundled
    /// replica (no data change has copied it yet), `bundledReplica` in place.
    public static func dump(path: String, bundledReplica: String, write: @escaping ([UInt8]) throws -> Void) throws {
        guard !FileManager.default.fileExists(atPath: path) else { return try dump(path: path, write: write) }
        try dump(try ReplicaStorage(borrowing: bundledReplica, copyingTo: path), write: write)
    }

    private static func dump(_ storage: ReplicaStorage, write: @escaping ([UInt8]) throws -> Void) throws {
        var writer = NDJSONWriter(write: write)
        try storage.forEachRecord { try writer.append(line: $0) }
        try writer.flush()
    }
}
