/// Why a body or snapshot could not be read.
package enum BodyError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidJSON(JSONParseError)
    case invalidRecord(index: Int, RecordError)
    case missingField(String)
    case invalidField(String, String)
    case unsupportedFormat(Int)
    case countMismatch(announced: Int, found: Int)
    case checksumMismatch(expected: StateChecksum, computed: StateChecksum)
    case duplicateRecord(id: String)
    case tombstoneInFullBody(id: String)

    package var description: String {
        switch self {
        case .invalidJSON(let error): "\(error)"
        case .invalidRecord(let index, let error): "record #\(index + 1): \(error)"
        case .missingField(let name): "the body has no \"\(name)\" before \"records\""
        case .invalidField(let name, let reason): "\"\(name)\" \(reason)"
        case .unsupportedFormat(let format): "format \(format) is not supported (this build reads format \(BodyHeader.currentFormat))"
        case .countMismatch(let announced, let found): "the body announces \(announced) records but holds \(found)"
        case .checksumMismatch(let expected, let computed): "checksum mismatch: the body says \(expected), its records give \(computed)"
        case .duplicateRecord(let id): "record \"\(id)\" appears twice"
        case .tombstoneInFullBody(let id): "record \"\(id)\" is hidden, but a full body holds visible records only"
        }
    }
}

/// Reads a body or snapshot in the v1 wire format as a stream: the header first, then one
/// record at a time, so a body of any size is read in bounded memory.
///
/// ```swift
/// let reader = BodyReader(nextChunk: { try source.read() })
/// let header = try reader.readHeader()
/// while let record = try reader.nextRecord() { apply(record) }
/// ```
package final class BodyReader {
    private let json: JSONReader
    private var state = State.beforeHeader
    package private(set) var recordsRead = 0

    private enum State { case beforeHeader, inRecords, done }

    package init(nextChunk: @escaping () throws -> [UInt8]?) {
        json = JSONReader(nextChunk: nextChunk)
    }

    package init(bytes: [UInt8]) {
        json = JSONReader(bytes: bytes)
    }

    /// Reads the metadata up to the start of `records`. Unknown members are skipped, so
    /// later formats may add fields.
    package func readHeader() throws -> BodyHeader {
        precondition(state == .beforeHeader, "readHeader called twice")
        do {
            try json.expect(UInt8(ascii: "{"))
            var fields: [String: JSONValue] = [:]
            while true {
                let key = try json.readString()
                try json.expect(UInt8(ascii: ":"))
                if key == "records" { break }
                fields[key] = try json.readValue()
                try json.expect(UInt8(ascii: ","))
            }
            try json.expect(UInt8(ascii: "["))
            state = .inRecords
            return try Self.header(from: fields)
        } catch let error as JSONParseError {
            throw BodyError.invalidJSON(error)
        }
    }

    private static func header(from fields: [String: JSONValue]) throws(BodyError) -> BodyHeader {
        func string(_ name: String) throws(BodyError) -> String {
            guard let value = fields[name] else { throw .missingField(name) }
            guard case .string(let text) = value else { throw .invalidField(name, "must be a string") }
            return text
        }
        func integer(_ name: String) throws(BodyError) -> Int {
            guard let value = fields[name] else { throw .missingField(name) }
            guard case .number(let literal) = value, let number = Int(literal), number >= 0 else {
                throw .invalidField(name, "must be a non-negative integer")
            }
            return number
        }
        let format = try integer("format")
        guard format == BodyHeader.currentFormat else { throw .unsupportedFormat(format) }
        guard let kind = BodyKind(rawValue: try string("kind")) else { throw .invalidField("kind", "must be \"full\" or \"delta\"") }
        guard let checksum = StateChecksum(try string("checksum")) else { throw .invalidField("checksum", "must be 16 hex digits") }
        let base: String? = kind == .delta ? try string("base") : nil
        return BodyHeader(
            format: format, collection: try string("collection"), kind: kind, base: base,
            token: try string("token"), lastModified: try string("lastModified"),
            checksum: checksum, count: try integer("count"))
    }

    /// The next record, or `nil` after the last one (having checked the body ends properly).
    package func nextRecord() throws -> Record? {
        precondition(state != .beforeHeader, "readHeader must come first")
        guard state == .inRecords else { return nil }
        do {
            if recordsRead == 0 {
                if try json.peekSignificantByte() == UInt8(ascii: "]") {
                    try finishBody()
                    return nil
                }
            } else {
                try json.skipWhitespace()
                if try json.peekSignificantByte() == UInt8(ascii: "]") {
                    try finishBody()
                    return nil
                }
                try json.expect(UInt8(ascii: ","))
            }
            try json.skipWhitespace()
            // The common case in one pass: a canonical record wholly in the buffer.
            if let scanned = json.withBufferedBytes(CanonicalRecordScanner.scanPrefix) {
                json.skipBuffered(scanned.length)
                recordsRead += 1
                return scanned.record
            }
            let line = json.line
            let offset = json.offset
            let raw = try json.readRawValue()
            do {
                let record = try Record.parse(raw)
                recordsRead += 1
                return record
            } catch let error as RecordError {
                throw BodyError.invalidRecord(index: recordsRead, error)
            } catch let error as JSONParseError {
                throw BodyError.invalidJSON(JSONParseError(line: line + error.line - 1, offset: offset + error.offset, reason: error.reason))
            }
        } catch let error as JSONParseError {
            throw BodyError.invalidJSON(error)
        }
    }

    private func finishBody() throws {
        try json.expect(UInt8(ascii: "]"))
        // Members after "records" are allowed and ignored, as before it.
        while try json.peekSignificantByte() == UInt8(ascii: ",") {
            try json.expect(UInt8(ascii: ","))
            _ = try json.readString()
            try json.expect(UInt8(ascii: ":"))
            _ = try json.readValue()
        }
        try json.expect(UInt8(ascii: "}"))
        guard try json.isAtEnd() else { throw json.error("unexpected data after the body") }
        state = .done
    }
}
