/// Prints a replica's records without opening it as a ``DeltaSnapReplica`` (no collection
/// or URL needed): `deltasnap dump`.
public enum ReplicaDump {
    /// Streams the records as NDJSON sorted by id, in chunks of about 64 KiB.
    public static func dump(path: String, write: ([UInt8]) throws -> Void) throws {
        let storage = try ReplicaStorage(path: path)
        var chunk: [UInt8] = []
        try storage.forEachRecord { bytes in
            chunk.append(contentsOf: bytes)
            chunk.append(UInt8(ascii: "\n"))
            if chunk.count >= 64 * 1024 {
                try write(chunk)
                chunk.removeAll(keepingCapacity: true)
            }
        }
        if !chunk.isEmpty { try write(chunk) }
    }
}
