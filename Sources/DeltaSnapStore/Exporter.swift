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
    public static func export(store: Store, collection: String, write: ([UInt8]) throws -> Void) throws {
        try store.read { reader in
            guard try reader.head(of: collection) != nil else { throw StoreError.unknownCollection(collection) }
            var chunk: [UInt8] = []
            chunk.reserveCapacity(80 * 1024)
            try reader.forEachVisibleRecord(in: collection) { bytes in
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
}
