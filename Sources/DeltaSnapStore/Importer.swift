import DeltaSnapCore

/// A bad input line: where it is and why, as `FILE:LINE: reason`.
public struct ImportError: Error, Equatable, Sendable, CustomStringConvertible {
    public var source: String
    public var line: Int
    public var reason: String
    /// Whether the input held no record at all while replacing: nothing was committed.
    public var isEmptyReplace = false

    public init(source: String, line: Int, reason: String) {
        self.source = source
        self.line = line
        self.reason = reason
    }

    public var description: String { "\(source):\(line): \(reason)" }
}

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
public struct Importer {
    public var store: Store
    public var collection: String
    /// Hide every stored record the input does not mention.
    public var replace: Bool
    /// Called every `progressInterval` records with the number read so far.
    public var progress: ((Int) -> Void)?
    public var progressInterval = 100_000

    public init(store: Store, collection: String, replace: Bool = false, progress: ((Int) -> Void)? = nil) {
        self.store = store
        self.collection = collection
        self.replace = replace
        self.progress = progress
    }

    /// Reads every record from `source` (named `name` in errors) and commits them.
    public func run(source: @escaping ChunkSource, name: String) throws -> WriteResult {
        let reader = JSONReader(nextChunk: source)
        return try store.write(to: collection) { writer in
            var line = 1
            var read = 0
            var isArray = false
            func fail(_ reason: String, at errorLine: Int? = nil) -> ImportError {
                ImportError(source: name, line: errorLine ?? line, reason: reason)
            }
            func putNext() throws {
                try reader.skipWhitespace()
                line = reader.line
                // An NDJSON record is one line: errors name that line even when the parser
                // only noticed the problem further on (an unclosed object).
                let raw: [UInt8]
                do {
                    raw = try reader.readRawValue()
                } catch let error as JSONParseError {
                    throw fail(error.reason, at: isArray ? error.line : line)
                }
                let record: Record
                do {
                    record = try Record.parse(raw)
                } catch let error as JSONParseError {
                    // Lines counted from the start of the record.
                    throw fail(error.reason, at: isArray ? line + error.line - 1 : line)
                } catch let error as RecordError {
                    throw fail(error.description)
                }
                do {
                    try writer.put(record)
                } catch let error as RecordError {
                    throw fail(error.description)
                } catch let error as StoreError {
                    throw fail(error.description)
                }
                read += 1
                if read % progressInterval == 0 { progress?(read) }
            }
            do {
                if try reader.peekSignificantByte() == UInt8(ascii: "[") {
                    // A JSON array of records.
                    isArray = true
                    try reader.expect(UInt8(ascii: "["))
                    if try reader.peekSignificantByte() == UInt8(ascii: "]") {
                        try reader.expect(UInt8(ascii: "]"))
                    } else {
                        while true {
                            try putNext()
                            if try reader.peekSignificantByte() == UInt8(ascii: "]") {
                                try reader.expect(UInt8(ascii: "]"))
                                break
                            }
                            try reader.expect(UInt8(ascii: ","))
                        }
                    }
                    guard try reader.isAtEnd() else { throw fail("unexpected data after the JSON array", at: reader.line) }
                } else {
                    // NDJSON: one record per line (any whitespace between records is accepted).
                    while try !reader.isAtEnd() {
                        try putNext()
                    }
                }
            } catch let error as JSONParseError {
                throw fail(error.reason, at: error.line)
            }
            if replace {
                // An input that lost its records on the way (a failed export, a dropped
                // body) must not read as "the collection is now empty" and hide everything.
                guard read > 0 else {
                    var error = fail("a replacing import with no records would hide every record; nothing was committed (to empty a collection, hide its records explicitly)", at: 1)
                    error.isEmptyReplace = true
                    throw error
                }
                try writer.hideRecordsNotPut()
            }
        }
    }
}
