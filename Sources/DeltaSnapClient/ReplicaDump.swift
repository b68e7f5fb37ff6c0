import DeltaSnapCore

/// Prints a replica's records without opening it as a ``DeltaSnapReplica`` (no collection
/// or URL needed): `deltasnap dump`.
public enum ReplicaDump {
    /// Streams the records as NDJSON sorted by id, in chunks of about 64 KiB.
    /// With `bundledReplica`: while no data change has copied that bundle to `path`, the
    /// bundle is dumped, read in place.
    public static func dump(path: String, bundledReplica: String? = nil, write: @escaping ([UInt8]) throws -> Void) throws {
        let storage = try ReplicaStorage.opening(path, bundledReplica: bundledReplica)
        var writer = NDJSONWriter(write: write)
        try storage.forEachRecord { try writer.append(line: $0) }
        try writer.flush()
    }
}
