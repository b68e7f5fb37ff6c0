/// One record of a collection in canonical form: its `id`, whether it is hidden, and its bytes.
///
/// A visible record's bytes are the canonical JSON of the whole object (the reserved
/// `hidden` key removed). A hidden record (a tombstone) is always `{"hidden":true,"id":"…"}`.
///
/// ```swift
/// let value = try JSONReader(bytes: Array(#"{ "name": "Andorra", "id": "AD" }"#.utf8)).readValue()
/// let record = try Record(parsing: value)
/// record.id     // "AD"
/// record.text   // {"id":"AD","name":"Andorra"}
/// ```
package struct Record: Hashable, Sendable {
    /// The attribute that names a record; a non-empty string.
    package static let idKey = "id"
    /// The attribute that hides a record; `true` or `false` only.
    package static let hiddenKey = "hidden"

    package let id: String
    package let isHidden: Bool
    /// Canonical bytes: what is stored, sent, hashed and compared.
    package let bytes: [UInt8]

    /// Validates a parsed JSON value as a record and computes its canonical bytes.
    package init(parsing value: JSONValue) throws(RecordError) {
        guard case .object(var members) = value else { throw .notAnObject }
        guard let idIndex = members.firstIndex(where: { $0.key == Self.idKey }) else { throw .missingID }
        guard case .string(let id) = members[idIndex].value else { throw .idNotAString }
        guard !id.isEmpty else { throw .emptyID }
        // C APIs (SQLite's text binding among them) end a string at U+0000: such an id would
        // be stored, hashed and compared as another one.
        guard !id.utf8.contains(0) else { throw .idContainsNUL }
        var hidden = false
        if let hiddenIndex = members.firstIndex(where: { $0.key == Self.hiddenKey }) {
            guard case .bool(let flag) = members[hiddenIndex].value else { throw .hiddenNotABoolean(id: id) }
            hidden = flag
            members.remove(at: hiddenIndex)
        }
        if hidden {
            self = Record.tombstone(id: id)
        } else {
            self.init(id: id, isHidden: false, bytes: CanonicalJSON.bytes(.object(members)))
        }
    }

    /// Parses and validates one record from JSON bytes.
    package init(json bytes: [UInt8]) throws {
        self = try Record.parse(bytes)
    }

    /// Parses one record from the bytes of one JSON value. Bytes that are already canonical
    /// are validated in one pass and kept as they are; anything else goes through the full
    /// parser, which canonicalises it or throws a `JSONParseError` (lines and offsets counted
    /// from the start of `bytes`) or a ``RecordError``.
    package static func parse(_ bytes: [UInt8]) throws -> Record {
        if let record = bytes.withUnsafeBytes(CanonicalRecordScanner.scan) { return record }
        let reader = JSONReader(bytes: bytes)
        let value = try reader.readValue()
        guard try reader.isAtEnd() else { throw reader.error("unexpected data after the record") }
        return try Record(parsing: value)
    }

    /// Bytes proven canonical: by the scanner, or by an earlier parse whose result was kept
    /// (an import's sort file, written and read back by the same process).
    package init(canonicalBytes: [UInt8], id: String, isHidden: Bool) {
        self.init(id: id, isHidden: isHidden, bytes: canonicalBytes)
    }

    private init(id: String, isHidden: Bool, bytes: [UInt8]) {
        self.id = id
        self.isHidden = isHidden
        self.bytes = bytes
    }

    /// The tombstone of `id`: `{"hidden":true,"id":"…"}`.
    package static func tombstone(id: String) -> Record {
        var bytes = Array(#"{"hidden":true,"id":"#.utf8)
        CanonicalJSON.writeString(id, into: &bytes)
        bytes.append(UInt8(ascii: "}"))
        return Record(id: id, isHidden: true, bytes: bytes)
    }

    /// The canonical bytes as text.
    package var text: String { String(decoding: bytes, as: UTF8.self) }

    /// The 64-bit hash that the state checksum adds up.
    package var hash: UInt64 { XXH64.hash(bytes) }
}

/// Why a JSON value is not a valid record.
package enum RecordError: Error, Equatable, Sendable, CustomStringConvertible {
    case notAnObject
    case missingID
    case idNotAString
    case emptyID
    case idContainsNUL
    case hiddenNotABoolean(id: String)

    package var description: String {
        switch self {
        case .notAnObject: "a record must be a JSON object"
        case .missingID: "the record has no \"id\""
        case .idNotAString: "\"id\" must be a string"
        case .emptyID: "\"id\" must not be empty"
        case .idContainsNUL: "\"id\" must not contain U+0000"
        case .hiddenNotABoolean(let id): "record \"\(id)\": the reserved attribute \"hidden\" must be true or false"
        }
    }
}
