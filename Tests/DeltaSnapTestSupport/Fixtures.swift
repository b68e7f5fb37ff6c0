import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapSynthetic
import Foundation

/// Builders for test data.
public enum Fixtures {
    /// NDJSON text of synthetic records `range`.
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
    public static func importText(_ text: String, into store: Store, collection: String, replace: Bool = false) throws -> WriteResult {
        try Importer(store: store, collection: collection, replace: replace)
            .run(source: ChunkSources.bytes(Array(text.utf8)), name: "test")
    }

    /// The store's `export` output as text.
    public static func export(_ store: Store, _ collection: String) throws -> String {
        var out: [UInt8] = []
        try Exporter.export(store: store, collection: collection) { out.append(contentsOf: $0) }
        return String(decoding: out, as: UTF8.self)
    }
}
