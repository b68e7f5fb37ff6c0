import DeltaSnapCore
import Foundation

/// How a source column's value becomes a record member (docs/PROTOCOL.md is unchanged; the
/// mapping is in docs/FOLLOW.md): PostgreSQL's text form of the value, as the session this
/// follower opens writes it (`DateStyle ISO`, `TimeZone UTC`, `bytea_output hex`,
/// `lc_monetary C`), read by the column's type (a domain's is its base type). The initial copy (`col::text`) and the change stream (pgoutput's text
/// values) go through this one function, so a row reads the same either way.
///
/// ```swift
/// PgTextMapping.value("t", type: PgType.bool)                 // .bool(true)
/// PgTextMapping.value("2026-11-27 06:20:56+00", type: 1184)   // .string("2026-11-27T06:20:56Z")
/// ```
package enum PgTextMapping {
    /// The member value of `text`, a value of the type `oid`.
    package static func value(_ text: String, type oid: UInt32) -> JSONValue {
        if let element = PgType.arrayElement[oid] { return array(text, element: element) }
        switch oid {
        case PgType.bool: return .bool(text == "t" || text == "true")
        case PgType.int2, PgType.int4, PgType.int8, PgType.oid: return .number(text)
        case PgType.float4, PgType.float8, PgType.numeric:
            // NaN and the infinities have no JSON number: kept as PostgreSQL writes them.
            return isJSONNumber(text) ? .number(text) : .string(text)
        case PgType.json, PgType.jsonb:
            // `json` keeps its text as written, duplicate keys too: the last value is kept, as
            // PostgreSQL's own `::jsonb` does (a record has each member once).
            let reader = JSONReader(bytes: Array(text.utf8))
            reader.keepsLastOfDuplicateKeys = true
            return (try? reader.readValue()) ?? .string(text)
        case PgType.money: return money(text).map(JSONValue.number) ?? .string(text)
        case PgType.timestamptz: return .string(rfc3339(text, zoned: true))
        case PgType.timestamp: return .string(rfc3339(text, zoned: false))
        case PgType.bytea: return .string(base64(hex: text) ?? text)
        default: return .string(text)
        }
    }

    /// `2026-11-27 06:20:56.5+00` → `2026-11-27T06:20:56.5Z`. What RFC 3339 cannot write —
    /// `infinity`, `-infinity`, a BC date, a year past 9999 — stays PostgreSQL's text.
    static func rfc3339(_ text: String, zoned: Bool) -> String {
        let bytes = text.utf8
        guard bytes.count >= 19, bytes[bytes.index(bytes.startIndex, offsetBy: 4)] == UInt8(ascii: "-"), !text.hasSuffix(" BC"),
              let space = text.firstIndex(of: " ")
        else { return text }
        var result = text
        result.replaceSubrange(space...space, with: "T")
        guard zoned else { return result }
        // The session's zone is UTC: the offset is `+00`.
        if result.hasSuffix("+00") { return String(result.dropLast(3)) + "Z" }
        // Any other offset (`+05:30`, `+05`) is already RFC 3339 once it has minutes.
        if let sign = result.lastIndex(where: { $0 == "+" || $0 == "-" }), result.distance(from: sign, to: result.endIndex) == 3 {
            return result + ":00"
        }
        return result
    }

    /// `\x0a0b` (bytea's hex output) as base64.
    static func base64(hex text: String) -> String? {
        let digits = Array(text.utf8)
        guard digits.count >= 2, digits[0] == UInt8(ascii: "\\"), digits[1] == UInt8(ascii: "x"), digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity((digits.count - 2) / 2)
        var index = 2
        while index < digits.count {
            guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return Data(bytes).base64EncodedString()
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// `money` as written under `lc_monetary C` (`$1,234.50`, `-$0.07`) → `1234.50`, `-0.07`:
    /// the amount, in the currency's units, with the digits PostgreSQL printed.
    static func money(_ text: String) -> String? {
        let amount = String(text.filter { $0 != "$" && $0 != "," })
        let parts = amount.drop { $0 == "-" }.split(separator: ".", omittingEmptySubsequences: false)
        let isDecimal = amount.first != "." && (1...2).contains(parts.count) && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }
        return isDecimal && amount.filter({ $0 == "-" }).count <= 1 ? amount : nil
    }

    /// Whether PostgreSQL's text of a number is also a JSON number.
    static func isJSONNumber(_ text: String) -> Bool {
        let digits = text.utf8.drop { $0 == UInt8(ascii: "-") }
        guard let first = digits.first else { return false }
        return (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first)
    }

    /// An array literal (`{1,2,NULL}`, `{"a b","c"}`, `{{1,2},{3,4}}`), its elements read by
    /// `element`'s type.
    static func array(_ text: String, element: UInt32) -> JSONValue {
        var parser = ArrayLiteral(bytes: Array(text.utf8), element: element)
        return (try? parser.parse()) ?? .string(text)
    }

    private struct ArrayLiteral {
        let bytes: [UInt8]
        let element: UInt32
        var offset = 0

        struct Malformed: Error {}

        init(bytes: [UInt8], element: UInt32) {
            self.bytes = bytes
            self.element = element
            // `[1:3]={…}`: explicit bounds are dropped (a JSON array starts at 0).
            if bytes.first == UInt8(ascii: "["), let equals = bytes.firstIndex(of: UInt8(ascii: "=")) { offset = equals + 1 }
        }

        mutating func parse() throws -> JSONValue {
            let value = try list()
            guard offset == bytes.count else { throw Malformed() }
            return value
        }

        mutating func list() throws -> JSONValue {
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "{") else { throw Malformed() }
            offset += 1
            var items: [JSONValue] = []
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
                offset += 1
                return .array(items)
            }
            while offset < bytes.count {
                if bytes[offset] == UInt8(ascii: "{") {
                    items.append(try list())
                } else if bytes[offset] == UInt8(ascii: "\"") {
                    items.append(PgTextMapping.value(try quoted(), type: element))
                } else {
                    let start = offset
                    while offset < bytes.count, bytes[offset] != UInt8(ascii: ","), bytes[offset] != UInt8(ascii: "}") { offset += 1 }
                    let text = String(decoding: bytes[start..<offset], as: UTF8.self)
                    items.append(text == "NULL" ? .null : PgTextMapping.value(text, type: element))
                }
                guard offset < bytes.count else { throw Malformed() }
                if bytes[offset] == UInt8(ascii: ",") {
                    offset += 1
                } else if bytes[offset] == UInt8(ascii: "}") {
                    offset += 1
                    return .array(items)
                } else {
                    throw Malformed()
                }
            }
            throw Malformed()
        }

        mutating func quoted() throws -> String {
            offset += 1
            var text: [UInt8] = []
            while offset < bytes.count {
                let byte = bytes[offset]
                offset += 1
                if byte == UInt8(ascii: "\\") {
                    guard offset < bytes.count else { throw Malformed() }
                    text.append(bytes[offset])
                    offset += 1
                } else if byte == UInt8(ascii: "\"") {
                    return String(decoding: text, as: UTF8.self)
                } else {
                    text.append(byte)
                }
            }
            throw Malformed()
        }
    }
}

/// The type OIDs the mapping reads (fixed in every PostgreSQL release: `pg_type.dat`).
package enum PgType {
    package static let bool: UInt32 = 16
    package static let bytea: UInt32 = 17
    package static let int8: UInt32 = 20
    package static let int2: UInt32 = 21
    package static let int4: UInt32 = 23
    package static let oid: UInt32 = 26
    package static let json: UInt32 = 114
    package static let float4: UInt32 = 700
    package static let float8: UInt32 = 701
    package static let timestamp: UInt32 = 1114
    package static let timestamptz: UInt32 = 1184
    package static let numeric: UInt32 = 1700
    package static let money: UInt32 = 790
    package static let jsonb: UInt32 = 3802

    /// Array types and their element types.
    package static let arrayElement: [UInt32: UInt32] = [
        1000: bool, 1001: bytea, 1005: int2, 1007: int4, 1016: int8, 1028: oid, 199: json, 3807: jsonb,
        1021: float4, 1022: float8, 1231: numeric, 1115: timestamp, 1185: timestamptz,
        791: money, 1009: 25, 1015: 1043, 1014: 1042, 2951: 2950, 1182: 1082, 1183: 1083,
    ]
}
