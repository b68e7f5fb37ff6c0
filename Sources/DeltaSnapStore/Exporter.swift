import DeltaSnapCore

/// Writes a collection's visible records as NDJSON sorted by id, one canonical record a line.
///
/// The client's `dump` prints the same bytes for the same state, so the two can be compared.
///
/// ```swift
/// try Exporter.export(store: store, collection: "countries") { chunk in
///     FileHandle.standardOutput.write(Data(chunk))
/// }
/// ```
public enum Exporter {
    /// Streams the NDJSON in chunks of about 64 KiB to `write`.
    public static func export(store: Store, collection: String, write: @escaping ([UInt8]) throws -> Void) throws {
        try store.read { reader in
            guard try reader.head(of: collection) != nil else { throw StoreError.unknownCollection(collection) }
            var writer = NDJSONWriter(write: write)
            try reader.forEachVisibleRecord(in: collection) { try writer.append(line: $0) }
            try writer.flush()
        }
    }
}
