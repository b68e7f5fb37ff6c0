/// A pull parser for JSON that reads from a byte buffer or from a stream of chunks.
///
/// Written by hand on purpose: DeltaSnap needs canonical bytes (number literals kept as
/// written, keys sorted by bytes, duplicate keys rejected), line numbers for `FILE:LINE`
/// errors, and streaming over a gzip body of any size. Foundation's `JSONSerialization`
/// and `JSONDecoder` do none of these (numbers become `Double`/`NSNumber`, whole documents
/// are held in memory), and no package in the mirror does them either.
///
/// ```swift
/// let reader = JSONReader(bytes: Array("{\"id\":\"AD\"}\n{\"id\":\"AE\"}".utf8))
/// while try !reader.isAtEnd() {
///     let value = try reader.readValue()
/// }
/// ```
package final class JSONReader {
    /// Objects and arrays nested deeper than this are rejected instead of overflowing the stack.
    package static let maximumDepth = 64

    private var buffer: [UInt8]
    private var position = 0
    /// Bytes of the input consumed before `buffer` started.
    private var bufferStart = 0
    private var exhausted: Bool
    private let nextChunk: (() throws -> [UInt8]?)?

    /// 1-based line number of the next unread byte.
    package private(set) var line = 1

    /// Whether an object may name a key twice, its last value kept — PostgreSQL's `jsonb`
    /// rule, for reading a `json` column (which keeps its text as written). Off: a duplicate
    /// key is an error, as a record's must be.
    package var keepsLastOfDuplicateKeys = false

    /// Reads from one complete buffer.
    package init(bytes: [UInt8]) {
        buffer = bytes
        exhausted = true
        nextChunk = nil
    }

    /// Reads from a stream: `nextChunk` returns the next bytes, or `nil` at the end.
    package init(nextChunk: @escaping () throws -> [UInt8]?) {
        buffer = []
        exhausted = false
        self.nextChunk = nextChunk
    }

    /// 0-based offset of the next unread byte from the start of the input.
    package var offset: Int { bufferStart + position }

    // MARK: - Bytes

    /// Makes sure an unread byte is buffered; false at the end of the input.
    @inline(__always)
    private func ensureByte() throws -> Bool {
        if position < buffer.count { return true }
        return try refill()
    }

    private func refill() throws -> Bool {
        // The parser never looks back, so consumed bytes can be dropped wholesale.
        while !exhausted {
            guard let chunk = try nextChunk?() else {
                exhausted = true
                break
            }
            if chunk.isEmpty { continue }
            bufferStart += buffer.count
            buffer = chunk
            position = 0
            return true
        }
        return false
    }

    /// The bytes buffered after the current position (a prefix of what is left to read).
    func withBufferedBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try buffer.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[position...])) }
    }

    /// Moves past `count` buffered bytes that contain no line break (a canonical record).
    func skipBuffered(_ count: Int) {
        precondition(position + count <= buffer.count)
        position += count
    }

    private func peek() throws -> UInt8? {
        try ensureByte() ? buffer[position] : nil
    }

    private func next() throws -> UInt8 {
        guard try ensureByte() else { throw error("unexpected end of input") }
        let byte = buffer[position]
        position += 1
        return byte
    }

    /// An error at the current position.
    package func error(_ reason: String) -> JSONParseError {
        JSONParseError(line: line, offset: offset, reason: reason)
    }

    /// Skips spaces, tabs, carriage returns and newlines, counting lines.
    package func skipWhitespace() throws {
        while try ensureByte() {
            switch buffer[position] {
            case UInt8(ascii: "\n"): line += 1; position += 1
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"): position += 1
            default: return
            }
        }
    }

    /// True when only whitespace is left.
    package func isAtEnd() throws -> Bool {
        try skipWhitespace()
        return try !ensureByte()
    }

    /// The next non-whitespace byte, without consuming it; `nil` at the end.
    package func peekSignificantByte() throws -> UInt8? {
        try skipWhitespace()
        return try peek()
    }

    /// Consumes `byte` (after whitespace) or throws naming what was found instead.
    package func expect(_ byte: UInt8) throws {
        try skipWhitespace()
        guard try ensureByte() else {
            throw error("unexpected end of input, expected '\(Character(Unicode.Scalar(byte)))'")
        }
        let found = buffer[position]
        guard found == byte else {
            throw error("expected '\(Character(Unicode.Scalar(byte)))', found \(describe(found))")
        }
        position += 1
    }

    private func describe(_ byte: UInt8) -> String {
        (0x21...0x7E).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
    }

    // MARK: - Raw values

    /// The bytes of the next value exactly as written (after skipping whitespace), without
    /// validating them: the caller validates (see `Record.parse`). Tracks lines, so
    /// ``line`` stays right; throws only at the end of the input.
    package func readRawValue() throws -> [UInt8] {
        try scanRawValue(keeping: true)
    }

    /// Moves past the next value as ``readRawValue()`` reads it, keeping nothing.
    package func skipValue() throws {
        _ = try scanRawValue(keeping: false)
    }

    /// The value of member `key` of the object at the reader's position; every other member
    /// is skipped, not built (a partitioned import reads one field of every record). Nil when
    /// the value is not an object or has no such member. For input already known to be valid
    /// JSON (a record's canonical bytes): skipped members are not validated.
    package func member(_ key: String) throws -> JSONValue? {
        guard try peekSignificantByte() == UInt8(ascii: "{") else { return nil }
        position += 1
        if try peekSignificantByte() == UInt8(ascii: "}") { return nil }
        let wanted = Array(key.utf8)
        while true {
            try skipWhitespace()
            guard try peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let isWanted = try readString(equalTo: wanted)
            try expect(UInt8(ascii: ":"))
            if isWanted { return try readValue(depth: 1) }
            try skipValue()
            try skipWhitespace()
            let separator = try next()
            if separator == UInt8(ascii: "}") { return nil }
            guard separator == UInt8(ascii: ",") else { throw error("expected ',' or '}' in object, found \(describe(separator))") }
        }
    }

    private func scanRawValue(keeping: Bool) throws -> [UInt8] {
        try skipWhitespace()
        guard try ensureByte() else { throw error("unexpected end of input, expected a value") }
        var raw: [UInt8] = []
        if keeping { raw.reserveCapacity(512) }
        let first = buffer[position]
        if first != UInt8(ascii: "{") && first != UInt8(ascii: "[") && first != UInt8(ascii: "\"") {
            // A scalar: up to the next delimiter.
            while try ensureByte() {
                let byte = buffer[position]
                if byte == UInt8(ascii: ",") || byte == UInt8(ascii: "]") || byte == UInt8(ascii: "}")
                    || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\t") {
                    break
                }
                if keeping { raw.append(byte) }
                position += 1
            }
            return raw
        }
        var depth = 0
        var inString = false
        var escaped = false
        while true {
            guard try ensureByte() else { throw error(inString ? "unterminated string" : "unexpected end of input inside a value") }
            // Scan the buffered run, then copy it in one go.
            let start = position
            var done = false
            while position < buffer.count {
                let byte = buffer[position]
                position += 1
                if inString {
                    if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") {
                        inString = false
                        if depth == 0 { done = true; break }
                    }
                    continue
                }
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { done = true }
                case UInt8(ascii: "\n"): line += 1
                default: break
                }
                if done { break }
            }
            if keeping { raw.append(contentsOf: buffer[start..<position]) }
            if done { return raw }
        }
    }

    // MARK: - Values

    /// Reads one complete JSON value.
    package func readValue() throws -> JSONValue {
        try readValue(depth: 0)
    }

    private func readValue(depth: Int) throws -> JSONValue {
        try skipWhitespace()
        guard let byte = try peek() else { throw error("unexpected end of input, expected a value") }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < Self.maximumDepth else { throw error("nesting deeper than \(Self.maximumDepth)") }
            return try readObject(depth: depth + 1)
        case UInt8(ascii: "["):
            guard depth < Self.maximumDepth else { throw error("nesting deeper than \(Self.maximumDepth)") }
            return try readArray(depth: depth + 1)
        case UInt8(ascii: "\""):
            return .string(try readString())
        case UInt8(ascii: "t"):
            try readLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try readLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try readLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(try readNumber())
        default:
            throw error("unexpected \(describe(byte)), expected a value")
        }
    }

    private func readLiteral(_ word: StaticString) throws {
        let bytes = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
        for expected in bytes {
            guard try ensureByte(), buffer[position] == expected else { throw error("invalid literal, expected '\(word)'") }
            position += 1
        }
    }

    private func readObject(depth: Int) throws -> JSONValue {
        position += 1  // {
        var members: [JSONMember] = []
        if try peekSignificantByte() == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        while true {
            try skipWhitespace()
            guard try peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let key = try readString()
            try expect(UInt8(ascii: ":"))
            let value = try readValue(depth: depth)
            members.append(JSONMember(key, value))
            try skipWhitespace()
            let separator = try next()
            if separator == UInt8(ascii: "}") { break }
            guard separator == UInt8(ascii: ",") else { throw error("expected ',' or '}' in object, found \(describe(separator))") }
        }
        if keepsLastOfDuplicateKeys {
            var last: [String: Int] = [:]
            for (index, member) in members.enumerated() { last[member.key] = index }
            if last.count < members.count { members = members.indices.filter { last[members[$0].key] == $0 }.map { members[$0] } }
        }
        members.sort { $0.key.utf8Precedes($1.key) }
        for index in members.indices.dropFirst() where members[index].key == members[index - 1].key {
            throw error("duplicate key \"\(members[index].key)\"")
        }
        return .object(members)
    }

    private func readArray(depth: Int) throws -> JSONValue {
        position += 1  // [
        var elements: [JSONValue] = []
        if try peekSignificantByte() == UInt8(ascii: "]") {
            position += 1
            return .array(elements)
        }
        while true {
            elements.append(try readValue(depth: depth))
            try skipWhitespace()
            let separator = try next()
            if separator == UInt8(ascii: "]") { break }
            guard separator == UInt8(ascii: ",") else { throw error("expected ',' or ']' in array, found \(describe(separator))") }
        }
        return .array(elements)
    }

    /// Reads a string token (the reader stands on its opening quote) as validated UTF-8.
    package func readString() throws -> String {
        try skipWhitespace()
        guard try next() == UInt8(ascii: "\"") else { throw error("expected a string") }
        var bytes: [UInt8] = []
        while true {
            guard try ensureByte() else { throw error("unterminated string") }
            // Copy the run of plain bytes in one go: most strings have no escapes.
            let end = plainRunEnd()
            bytes.append(contentsOf: buffer[position..<end])
            position = end
            guard position < buffer.count else { continue }
            let byte = buffer[position]
            position += 1
            if byte == UInt8(ascii: "\"") { break }
            if byte < 0x20 { throw error("control character 0x\(String(byte, radix: 16)) in string must be escaped") }
            try readEscape(into: &bytes)
        }
        guard let string = String(validating: bytes, as: UTF8.self) else { throw error("string is not valid UTF-8") }
        return string
    }

    /// Reads a string and says whether its bytes (escapes decoded) are `wanted`: ``member(_:)``'s
    /// test of each key, without building a `String` for every key it passes — that was two
    /// thirds of the time `import --partition-by` spends finding each record's partition.
    private func readString(equalTo wanted: [UInt8]) throws -> Bool {
        try skipWhitespace()
        guard try next() == UInt8(ascii: "\"") else { throw error("expected a string") }
        var matched = 0
        var equal = true
        var decoded: [UInt8] = []
        func compare(_ bytes: some Collection<UInt8>) {
            guard equal else { return }
            if matched + bytes.count <= wanted.count, bytes.elementsEqual(wanted[matched..<(matched + bytes.count)]) {
                matched += bytes.count
            } else {
                equal = false
            }
        }
        while true {
            guard try ensureByte() else { throw error("unterminated string") }
            let end = plainRunEnd()
            compare(buffer[position..<end])
            position = end
            guard position < buffer.count else { continue }
            let byte = buffer[position]
            position += 1
            if byte == UInt8(ascii: "\"") { break }
            if byte < 0x20 { throw error("control character 0x\(String(byte, radix: 16)) in string must be escaped") }
            decoded.removeAll(keepingCapacity: true)
            try readEscape(into: &decoded)
            compare(decoded)
        }
        return equal && matched == wanted.count
    }

    /// Where the run of a string's plain bytes that starts at `position` ends in the buffer:
    /// at a quote, a backslash, a control byte or the buffer's end. Most strings are one run.
    @inline(__always)
    private func plainRunEnd() -> Int {
        var end = position
        while end < buffer.count {
            let byte = buffer[end]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            end += 1
        }
        return end
    }

    private func readEscape(into bytes: inout [UInt8]) throws {
        let escape = try next()
        switch escape {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): bytes.append(escape)
        case UInt8(ascii: "b"): bytes.append(0x08)
        case UInt8(ascii: "f"): bytes.append(0x0C)
        case UInt8(ascii: "n"): bytes.append(0x0A)
        case UInt8(ascii: "r"): bytes.append(0x0D)
        case UInt8(ascii: "t"): bytes.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try readHex4()
            if (0xD800...0xDBFF).contains(scalar) {
                guard try next() == UInt8(ascii: "\\"), try next() == UInt8(ascii: "u") else {
                    throw error("unpaired UTF-16 surrogate in \\u escape")
                }
                let low = try readHex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired UTF-16 surrogate in \\u escape") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw error("unpaired UTF-16 surrogate in \\u escape")
            }
            bytes.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
        default:
            throw error("invalid escape \\\(describe(escape))")
        }
    }

    private func readHex4() throws -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = try next()
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("invalid hex digit in \\u escape")
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// Reads a number, validating the JSON grammar, and returns its literal text.
    private func readNumber() throws -> String {
        var text: [UInt8] = []
        func digits(atLeastOne: Bool) throws {
            var count = 0
            while let byte = try peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                text.append(byte)
                position += 1
                count += 1
            }
            if atLeastOne && count == 0 { throw error("invalid number: expected a digit") }
        }
        if try peek() == UInt8(ascii: "-") {
            text.append(UInt8(ascii: "-"))
            position += 1
        }
        if try peek() == UInt8(ascii: "0") {
            text.append(UInt8(ascii: "0"))
            position += 1
            if let byte = try peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                throw error("invalid number: leading zero")
            }
        } else {
            try digits(atLeastOne: true)
        }
        if try peek() == UInt8(ascii: ".") {
            text.append(UInt8(ascii: "."))
            position += 1
            try digits(atLeastOne: true)
        }
        if let byte = try peek(), byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
            text.append(byte)
            position += 1
            if let sign = try peek(), sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
                text.append(sign)
                position += 1
            }
            try digits(atLeastOne: true)
        }
        return String(decoding: text, as: UTF8.self)
    }
}
