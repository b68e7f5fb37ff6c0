import DeltaSnapCore

/// Prints a replica's records without opening it as a ``DeltaSnapReplica`` (no collection
/// or URL needed): `deltasnap dump`.
package enum ReplicaDump {
    /// Streams the records as NDJSON sorted by id, in chunks of about 64 KiB.
    /// With `bundledReplica`: while no data change has copied that bundle to `path`, the
    /// bundle is dumped, read in place.
    /// With `collection`: that collection or partition of a view's file (``DeltaSnapView``).
    package static func dump(
        path: String, bundledReplica: String? = nil, collection: String? = nil, write: @escaping ([UInt8]) throws -> Void
    ) throws {
        if let collection { try CollectionPath.validate(collection) }
        let storage = try ReplicaStorage.opening(path, bundledReplica: bundledReplica, scope: collection ?? "")
        if collection == nil, storage.borrowed == nil, let partition = try storage.heldPartitions().keys.min() {
            throw ViewFileError(path: path, example: partition)
        }
        var writer = NDJSONWriter(write: write)
        try storage.forEachRecord { try writer.append(line: $0) }
        try writer.flush()
    }
}

/// A view's file (``DeltaSnapView``) used where one collection was expected: it holds many,
/// and the command must name one.
package struct ViewFileError: Error, CustomStringConvertible {
    package var path: String
    /// One partition it holds, for the message.
    package var example: String

    package var description: String {
        "\(path) holds a view (several collections and partitions): name one with --collection, e.g. --collection \(example)"
    }
}
