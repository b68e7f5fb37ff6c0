import DeltaSnapCore

/// Reads records one at a time from NDJSON or a JSON array of records, as `import` accepts
/// them, with errors that name the input and line (`FILE:LINE: reason`).
///
/// Pull-based, so a caller can stream a million records into any store — SQLite's writer or
/// PostgreSQL's `COPY` — with bounded memory.
///
/// ```swift
/// let stream = RecordStream(source: try ChunkSources.file(at: "countries.ndjson"), name: "countries.ndjson")
/// while let record = try stream.next() { try writer.put(record) }
/// ```
///
/// `@unchecked Sendable`: a stream is handed once from its caller to the store that reads
/// it (SQLite's writer queue, a PostgreSQL `COPY`), and used by that one reader only.
package final class RecordStream: @unchecked Sendable {
    private let reader: JSONReader
    /// The input's name in errors (`NAME:LINE: reason`).
    package let name: String
    /// The line the record ``next()`` returned last began on (of a JSON array: where it
    /// began inside it).
    package private(set) var line = 1
    private var state = State.start
    /// Records returned so far.
    package private(set) var count = 0
    /// No records means an empty collection (a source table copied empty), not an input
    /// that lost them on the way: a replacing import of it hides everything.
    package var emptyIsIntended = false
    /// The records come in strictly ascending id order (UTF-8 bytes), as read from a keyed
    /// table: a store then needs no memory of the ids it was given — a repeated id is one
    /// out of order, and the records a replacing import leaves out lie between two given
    /// ones. Checked as the records come (``StoreError/duplicateID(_:)``).
    package var idsAscend = false
    /// The record ``next()`` returned last, as the input wrote it (for a record already
    /// parsed: its canonical bytes). A tombstone's canonical form keeps only its id, so what
    /// else its line said — the partition it belongs to — is read from these.
    package private(set) var lastWritten: [UInt8] = []

    private enum State {
        case start, ndjson, arrayFirst, arrayNext, finished
    }

    /// Records that come from elsewhere (one `PUT`'s, a sorted import's), with their line
    /// when they have one, instead of from a source.
    private var pulled: (() throws -> (record: Record, line: Int?)?)?

    package init(source: @escaping ChunkSource, name: String) {
        reader = JSONReader(nextChunk: source)
        self.name = name
    }

    /// A stream of records already parsed, so one write path serves a `PUT` and an import.
    package convenience init(records: [Record], name: String) {
        self.init(source: ChunkSources.bytes([]), name: name)
        var given = records.makeIterator()
        pulled = { given.next().map { ($0, nil) } }
    }

    /// A stream of the records `next` returns until nil, each with the line of `name` it
    /// came from (``RecordSorter``'s output).
    package convenience init(name: String, emptyIsIntended: Bool = false, next: @escaping () throws -> (record: Record, line: Int)?) {
        self.init(source: ChunkSources.bytes([]), name: name)
        self.emptyIsIntended = emptyIsIntended
        pulled = { try next().map { ($0.record, $0.line) } }
    }

    /// An error at the current line (or `line`) of this input.
    package func failure(_ reason: String, at errorLine: Int? = nil) -> ImportError {
        ImportError(source: name, line: errorLine ?? line, reason: reason)
    }

    /// The store's refusal of the current line (or `line`), keeping its code.
    package func failure(_ error: StoreError, at errorLine: Int? = nil) -> ImportError {
        var failure = failure(error.message, at: errorLine)
        failure.code = error.code
        return failure
    }

    /// The next record, or nil at the end of the input. Throws ``ImportError``.
    package func next() throws -> Record? {
        if let pulled {
            guard let (record, recordLine) = try pulled() else { return nil }
            if let recordLine { line = recordLine }
            count += 1
            lastWritten = record.bytes
            return record
        }
        do {
            switch state {
            case .start:
                if try reader.peekSignificantByte() == UInt8(ascii: "[") {
                    try reader.expect(UInt8(ascii: "["))
                    state = .arrayFirst
                } else {
                    state = .ndjson
                }
                return try next()
            case .ndjson:
                guard try !reader.isAtEnd() else {
                    state = .finished
                    return nil
                }
                return try record(inArray: false)
            case .arrayFirst, .arrayNext:
                if try reader.peekSignificantByte() == UInt8(ascii: "]") {
                    try reader.expect(UInt8(ascii: "]"))
                    guard try reader.isAtEnd() else { throw failure("unexpected data after the JSON array", at: reader.line) }
                    state = .finished
                    return nil
                }
                if state == .arrayNext { try reader.expect(UInt8(ascii: ",")) }
                state = .arrayNext
                return try record(inArray: true)
            case .finished:
                return nil
            }
        } catch let error as JSONParseError {
            throw failure(error.reason, at: error.line)
        }
    }

    private func record(inArray: Bool) throws -> Record {
        try reader.skipWhitespace()
        line = reader.line
        // An NDJSON record is one line: errors name that line even when the parser only
        // noticed the problem further on (an unclosed object).
        let raw: [UInt8]
        do {
            raw = try reader.readRawValue()
        } catch let error as JSONParseError {
            throw failure(error.reason, at: inArray ? error.line : line)
        }
        do {
            let record = try Record.parse(raw)
            count += 1
            lastWritten = raw
            return record
        } catch let error as JSONParseError {
            // Lines counted from the start of the record.
            throw failure(error.reason, at: inArray ? line + error.line - 1 : line)
        } catch let error as RecordError {
            throw failure(error.description)
        }
    }
}

extension RecordStream {
    /// An input that lost its records on the way (a failed export, a dropped body) must not
    /// read as "the collection is now empty" and hide everything.
    package func refuseEmptyReplace() throws {
        guard count == 0, !emptyIsIntended else { return }
        var error = failure(
            "a replacing import with no records would hide every record; nothing was committed (to empty a collection, hide its records explicitly)",
            at: 1)
        error.isEmptyReplace = true
        throw error
    }
}
