import DeltaSnapCore
import DeltaSnapStore

/// Imports NDJSON or a JSON array of records into a collection as one version.
///
/// The input is streamed and diffed against the stored state; only records whose canonical
/// bytes change are written. Any bad record aborts the whole import: nothing is committed.
///
/// ```swift
/// let result = try Importer(store: store, collection: "countries", replace: true)
///     .run(source: try ChunkSources.file(at: "countries.ndjson"), name: "countries.ndjson")
/// print(result.upserted, result.hidden, result.token ?? "no change")
/// ```
package struct Importer {
    package var store: SQLiteDatabase
    package var collection: String
    /// Hide every stored record the input does not mention.
    package var replace: Bool
    /// Called every `progressInterval` records with the number read so far.
    package var progress: ((Int) -> Void)?
    package var progressInterval = 100_000

    package init(store: SQLiteDatabase, collection: String, replace: Bool = false, progress: ((Int) -> Void)? = nil) {
        self.store = store
        self.collection = collection
        self.replace = replace
        self.progress = progress
    }

    /// Reads every record from `source` (named `name` in errors) and commits them.
    package func run(source: @escaping ChunkSource, name: String) throws -> WriteResult {
        try run(stream: RecordStream(source: source, name: name))
    }

    /// Reads every record `stream` yields and commits them.
    package func run(stream: RecordStream) throws -> WriteResult {
        try store.write(to: collection) { writer in
            try Self.write(stream, into: writer, replace: replace, progress: progress, every: progressInterval)
        }
    }

    /// Every record of `stream` into `writer`, and with `replace` the stored records it does
    /// not name hidden: ids in ascending order are appended holding none of them
    /// (``DeltaSnapStore/RecordSorter``, a keyed source), others are remembered to refuse a repeat.
    static func write(_ stream: RecordStream, into writer: CollectionWriter, replace: Bool, progress: ((Int) -> Void)? = nil, every interval: Int = 100_000) throws {
        if stream.idsAscend {
            try each(stream, progress: progress, every: interval) { try writer.putAscending($0, replacing: replace) }
            if replace {
                try stream.refuseEmptyReplace()
                try writer.hideRecordsAfterLastAscending()
            }
        } else {
            try put(stream, into: writer, progress: progress, every: interval)
            if replace {
                try stream.refuseEmptyReplace()
                try writer.hideRecordsNotPut()
            }
        }
    }

    /// Every record of `stream` into `writer`; a refusal names the line.
    static func put(_ stream: RecordStream, into writer: CollectionWriter, progress: ((Int) -> Void)? = nil, every interval: Int = 100_000) throws {
        try each(stream, progress: progress, every: interval) { try writer.put($0) }
    }

    /// Calls `put` with every record of `stream`; a refusal names the line.
    static func each(_ stream: RecordStream, progress: ((Int) -> Void)? = nil, every interval: Int = 100_000, _ put: (Record) throws -> Void) throws {
        while let record = try stream.next() {
            do {
                try put(record)
            } catch let error as RecordError {
                throw stream.failure(error.description)
            } catch let error as StoreError {
                throw stream.failure(error)
            }
            if stream.count % interval == 0 { progress?(stream.count) }
        }
    }
}
