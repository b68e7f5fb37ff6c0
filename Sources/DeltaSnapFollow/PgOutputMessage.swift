/// One message of PostgreSQL's built-in `pgoutput` logical decoding plugin (protocol
/// version 1, text values), as `pg_logical_slot_peek_binary_changes` returns them, one per
/// row. Decoded by hand: PostgresNIO speaks the query protocol, and no listed package reads
/// this format (it is a short, fixed layout: PostgreSQL's "Logical Replication Message
/// Formats").
///
/// ```swift
/// let message = try PgOutputMessage(decoding: rowBytes)
/// if case .commit(_, let end, _) = message { … }
/// ```
package enum PgOutputMessage: Equatable, Sendable {
    /// A transaction starts: the LSN of its commit record, its commit time (µs since
    /// 2000-01-01) and its id.
    case begin(finalLSN: UInt64, commitTime: Int64, xid: UInt32)
    /// The transaction ends; `endLSN` is where a follower that applied it resumes.
    case commit(commitLSN: UInt64, endLSN: UInt64, commitTime: Int64)
    /// A table's shape, sent before its first change in each decoding session.
    case relation(PgRelation)
    case insert(relation: UInt32, new: [PgValue])
    /// `old` is the row's key (or whole row, with `REPLICA IDENTITY FULL`) when sent.
    case update(relation: UInt32, old: [PgValue]?, new: [PgValue])
    case delete(relation: UInt32, old: [PgValue])
    case truncate(relations: [UInt32])
    /// Anything a follower does not act on (origin, type, logical message).
    case other(UInt8)

    package init(decoding bytes: [UInt8]) throws(PgOutputError) {
        var reader = Reader(bytes: bytes)
        let kind = try reader.byte()
        switch kind {
        case UInt8(ascii: "B"):
            self = .begin(finalLSN: try reader.uint64(), commitTime: Int64(bitPattern: try reader.uint64()), xid: try reader.uint32())
        case UInt8(ascii: "C"):
            _ = try reader.byte()  // flags, unused
            self = .commit(commitLSN: try reader.uint64(), endLSN: try reader.uint64(), commitTime: Int64(bitPattern: try reader.uint64()))
        case UInt8(ascii: "R"):
            let id = try reader.uint32()
            let namespace = try reader.string()
            let name = try reader.string()
            let identity = try reader.byte()
            let count = Int(try reader.uint16())
            var columns: [PgRelation.Column] = []
            for _ in 0..<count {
                let flags = try reader.byte()
                let column = try reader.string()
                let type = try reader.uint32()
                _ = try reader.uint32()  // type modifier
                columns.append(PgRelation.Column(name: column, typeOID: type, isKey: flags & 1 == 1))
            }
            self = .relation(PgRelation(id: id, namespace: namespace, name: name, replicaIdentity: identity, columns: columns))
        case UInt8(ascii: "I"):
            let relation = try reader.uint32()
            guard try reader.byte() == UInt8(ascii: "N") else { throw .malformed("insert without a new tuple") }
            self = .insert(relation: relation, new: try reader.tuple())
        case UInt8(ascii: "U"):
            let relation = try reader.uint32()
            var marker = try reader.byte()
            var old: [PgValue]?
            if marker == UInt8(ascii: "K") || marker == UInt8(ascii: "O") {
                old = try reader.tuple()
                marker = try reader.byte()
            }
            guard marker == UInt8(ascii: "N") else { throw .malformed("update without a new tuple") }
            self = .update(relation: relation, old: old, new: try reader.tuple())
        case UInt8(ascii: "D"):
            let relation = try reader.uint32()
            let marker = try reader.byte()
            guard marker == UInt8(ascii: "K") || marker == UInt8(ascii: "O") else { throw .malformed("delete without an old tuple") }
            self = .delete(relation: relation, old: try reader.tuple())
        case UInt8(ascii: "T"):
            let count = Int(try reader.uint32())
            _ = try reader.byte()  // options: CASCADE, RESTART IDENTITY
            var relations: [UInt32] = []
            for _ in 0..<count { relations.append(try reader.uint32()) }
            self = .truncate(relations: relations)
        default:
            self = .other(kind)
        }
    }

    /// `X/Y` (PostgreSQL's text form of an LSN) as a number; nil when malformed.
    package static func lsn(_ text: String) -> UInt64? {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let high = UInt64(parts[0], radix: 16), let low = UInt64(parts[1], radix: 16), high <= UInt32.max, low <= UInt32.max
        else { return nil }
        return high << 32 | low
    }

    /// An LSN in PostgreSQL's text form (`16/B374D848`).
    package static func lsnText(_ lsn: UInt64) -> String {
        String(lsn >> 32, radix: 16, uppercase: true) + "/" + String(lsn & 0xFFFF_FFFF, radix: 16, uppercase: true)
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        mutating func byte() throws(PgOutputError) -> UInt8 {
            guard offset < bytes.count else { throw .malformed("message ends early") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func integer(_ width: Int) throws(PgOutputError) -> UInt64 {
            guard offset + width <= bytes.count else { throw .malformed("message ends early") }
            var value: UInt64 = 0
            for index in offset..<offset + width { value = value << 8 | UInt64(bytes[index]) }
            offset += width
            return value
        }

        mutating func uint16() throws(PgOutputError) -> UInt16 { UInt16(try integer(2)) }
        mutating func uint32() throws(PgOutputError) -> UInt32 { UInt32(try integer(4)) }
        mutating func uint64() throws(PgOutputError) -> UInt64 { try integer(8) }

        /// A NUL-terminated string.
        mutating func string() throws(PgOutputError) -> String {
            guard let end = bytes[offset...].firstIndex(of: 0) else { throw .malformed("unterminated string") }
            defer { offset = end + 1 }
            return String(decoding: bytes[offset..<end], as: UTF8.self)
        }

        mutating func tuple() throws(PgOutputError) -> [PgValue] {
            let count = Int(try uint16())
            var values: [PgValue] = []
            values.reserveCapacity(count)
            for _ in 0..<count {
                switch try byte() {
                case UInt8(ascii: "n"): values.append(.null)
                case UInt8(ascii: "u"): values.append(.unchangedToast)
                case UInt8(ascii: "t"), UInt8(ascii: "b"):
                    let length = Int(try uint32())
                    guard offset + length <= bytes.count else { throw .malformed("value ends early") }
                    values.append(.text(String(decoding: bytes[offset..<offset + length], as: UTF8.self)))
                    offset += length
                case let other: throw .malformed("unknown value kind \(other)")
                }
            }
            return values
        }
    }
}

/// A table as a `Relation` message describes it.
package struct PgRelation: Equatable, Sendable {
    package struct Column: Equatable, Sendable {
        package var name: String
        package var typeOID: UInt32
        /// Part of the replica identity (the primary key by default).
        package var isKey: Bool
    }

    package var id: UInt32
    package var namespace: String
    package var name: String
    /// `d` default (primary key), `f` full, `i` index, `n` nothing.
    package var replicaIdentity: UInt8
    package var columns: [Column]

    /// `schema.table`.
    package var qualifiedName: String { namespace + "." + name }
}

/// One column's value in a change: SQL `NULL`, a TOASTed value the update did not change
/// (not sent), or PostgreSQL's text form of the value.
package enum PgValue: Equatable, Sendable {
    case null
    case unchangedToast
    case text(String)
}

package enum PgOutputError: Error, Equatable, CustomStringConvertible {
    case malformed(String)

    package var description: String {
        switch self {
        case .malformed(let what): "malformed pgoutput message: \(what)"
        }
    }
}
