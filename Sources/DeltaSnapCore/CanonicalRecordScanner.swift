/// The fast path for records that are already canonical (every body and snapshot the
/// server writes, and most machine-written import files): one validating pass over the
/// bytes, no tree, no re-serialisation.
///
/// It answers `nil` whenever the bytes are not exactly canonical — whitespace, unsorted
/// keys, an escape that canonical form would not write, a `hidden` attribute other than a
/// tombstone's — and the caller falls back to the full parser, which also produces the
/// error messages. It never accepts invalid JSON: everything it accepts, the full parser
/// would turn into the same bytes (tests check this on generated and hand-written input).
enum CanonicalRecordScanner {
    static func scan(_ bytes: UnsafeRawBufferPointer) -> Record? {
        var scanner = Scanner(bytes: bytes)
        return scanner.record()
    }

    /// One canonical record at the start of `bytes` and how many bytes it takes; what follows
    /// it is not looked at. A body reader finds each record's end and validates it in this
    /// one pass (nil: not canonical, or not wholly in `bytes` — the caller falls back).
    static func scanPrefix(_ bytes: UnsafeRawBufferPointer) -> (record: Record, length: Int)? {
        var scanner = Scanner(bytes: bytes, requiresEnd: false)
        guard let record = scanner.record() else { return nil }
        return (record, scanner.index)
    }

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        /// Whether the record must end exactly at the end of ``bytes``.
        var requiresEnd = true

        init(bytes: UnsafeRawBufferPointer, requiresEnd: Bool = true) {
            self.bytes = bytes
            self.requiresEnd = requiresEnd
        }

        mutating func record() -> Record? {
            guard peek() == UInt8(ascii: "{") else { return nil }
            index += 1
            var idRange: Range<Int>?
            var hiddenTrue = false
            var keys = 0
            var previousKey: Range<Int>?
            if peek() == UInt8(ascii: "}") { return nil }  // no id
            while true {
                guard let key = plainString() else { return nil }
                if let previousKey, !precedes(previousKey, key) { return nil }
                previousKey = key
                keys += 1
                guard next() == UInt8(ascii: ":") else { return nil }
                if equals(key, "id") {
                    guard peek() == UInt8(ascii: "\""), let value = plainString(), !value.isEmpty else { return nil }
                    idRange = value
                } else if equals(key, "hidden") {
                    // Only a tombstone is canonical with `hidden`: {"hidden":true,"id":"…"}.
                    guard literal("true") else { return nil }
                    hiddenTrue = true
                } else {
                    guard value(depth: 1) else { return nil }
                }
                guard let separator = next() else { return nil }
                if separator == UInt8(ascii: "}") { break }
                guard separator == UInt8(ascii: ",") else { return nil }
            }
            guard !requiresEnd || index == bytes.count, let idRange else { return nil }
            if hiddenTrue && keys != 2 { return nil }
            let id = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[idRange]), as: UTF8.self)
            return Record(canonicalBytes: Array(UnsafeRawBufferPointer(rebasing: bytes[..<index])), id: id, isHidden: hiddenTrue)
        }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func next() -> UInt8? {
            guard index < bytes.count else { return nil }
            defer { index += 1 }
            return bytes[index]
        }

        func equals(_ range: Range<Int>, _ text: StaticString) -> Bool {
            guard range.count == text.utf8CodeUnitCount else { return false }
            let expected = UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
            return bytes[range].elementsEqual(expected)
        }

        /// Byte-wise order of two escape-free strings: canonical key order.
        func precedes(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
            bytes[a].lexicographicallyPrecedes(bytes[b])
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            let expected = UnsafeBufferPointer(start: word.utf8Start, count: count)
            guard bytes[index..<(index + count)].elementsEqual(expected) else { return false }
            index += count
            return true
        }

        /// A string with no escape at all (keys and ids); its content's byte range.
        mutating func plainString() -> Range<Int>? {
            guard next() == UInt8(ascii: "\"") else { return nil }
            let start = index
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    defer { index += 1 }
                    return start..<index
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
                if byte < 0x80 { index += 1 } else if !utf8Sequence() { return nil }
            }
            return nil
        }

        /// Any canonical string: only the escapes canonical form writes.
        mutating func string() -> Bool {
            guard next() == UInt8(ascii: "\"") else { return false }
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return true
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let escape = next() else { return false }
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                         UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        continue
                    case UInt8(ascii: "u"):
                        // Canonical \u escapes: \u00XX, lowercase, for controls without a short form.
                        guard index + 4 <= bytes.count, bytes[index] == UInt8(ascii: "0"), bytes[index + 1] == UInt8(ascii: "0") else { return false }
                        let high = bytes[index + 2]
                        let low = bytes[index + 3]
                        guard high == UInt8(ascii: "0") || high == UInt8(ascii: "1") else { return false }
                        let lowValue: UInt8
                        switch low {
                        case UInt8(ascii: "0")...UInt8(ascii: "9"): lowValue = low - UInt8(ascii: "0")
                        case UInt8(ascii: "a")...UInt8(ascii: "f"): lowValue = low - UInt8(ascii: "a") + 10
                        default: return false
                        }
                        let value = (high - UInt8(ascii: "0")) << 4 | lowValue
                        guard ![0x08, 0x09, 0x0A, 0x0C, 0x0D].contains(value) else { return false }
                        index += 4
                    default:
                        return false
                    }
                case 0x00..<0x20:
                    return false
                case 0x20..<0x80:
                    index += 1
                default:
                    guard utf8Sequence() else { return false }
                }
            }
            return false
        }

        /// Validates one multi-byte UTF-8 sequence starting at `index` (RFC 3629: no
        /// overlong forms, no surrogates, nothing above U+10FFFF).
        mutating func utf8Sequence() -> Bool {
            let lead = bytes[index]
            let count: Int
            var lowerBound: UInt8 = 0x80
            var upperBound: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: count = 2
            case 0xE0: count = 3; lowerBound = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: count = 3
            case 0xED: count = 3; upperBound = 0x9F
            case 0xF0: count = 4; lowerBound = 0x90
            case 0xF1...0xF3: count = 4
            case 0xF4: count = 4; upperBound = 0x8F
            default: return false
            }
            guard index + count <= bytes.count else { return false }
            let second = bytes[index + 1]
            guard second >= lowerBound && second <= upperBound else { return false }
            for offset in 2..<count where bytes[index + offset] & 0xC0 != 0x80 { return false }
            index += count
            return true
        }

        mutating func number() -> Bool {
            let start = index
            if peek() == UInt8(ascii: "-") { index += 1 }
            guard let first = peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
            index += 1
            if first == UInt8(ascii: "0") {
                if let byte = peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { return false }
            } else {
                digits()
            }
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard digits() else { return false }
            }
            if let byte = peek(), byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
                index += 1
                if let sign = peek(), sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { index += 1 }
                guard digits() else { return false }
            }
            return index > start
        }

        @discardableResult
        mutating func digits() -> Bool {
            let start = index
            while let byte = peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1 }
            return index > start
        }

        mutating func value(depth: Int) -> Bool {
            guard let byte = peek() else { return false }
            switch byte {
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            case UInt8(ascii: "["):
                guard depth < JSONReader.maximumDepth else { return false }
                index += 1
                if peek() == UInt8(ascii: "]") {
                    index += 1
                    return true
                }
                while true {
                    guard value(depth: depth + 1) else { return false }
                    guard let separator = next() else { return false }
                    if separator == UInt8(ascii: "]") { return true }
                    guard separator == UInt8(ascii: ",") else { return false }
                }
            case UInt8(ascii: "{"):
                guard depth < JSONReader.maximumDepth else { return false }
                index += 1
                if peek() == UInt8(ascii: "}") {
                    index += 1
                    return true
                }
                var previousKey: Range<Int>?
                while true {
                    guard let key = plainString() else { return false }
                    if let previousKey, !precedes(previousKey, key) { return false }
                    previousKey = key
                    guard next() == UInt8(ascii: ":"), value(depth: depth + 1) else { return false }
                    guard let separator = next() else { return false }
                    if separator == UInt8(ascii: "}") { return true }
                    guard separator == UInt8(ascii: ",") else { return false }
                }
            default:
                return false
            }
        }
    }
}
