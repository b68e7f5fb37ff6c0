/// A record's reference to an attachment: an immutable blob named by the SHA-256 of its
/// bytes, with its size and media type (docs/PROTOCOL.md, "Attachments").
///
/// A reference is the value of one of a record's top-level members — or one element of an
/// array that is such a value (a note with several photos) — written as an object with
/// exactly these three members:
///
/// ```json
/// {"id":"n1","photo":{"$attachment":"9f86d0…0a08","size":4,"type":"image/jpeg"}}
/// ```
///
/// so the record's canonical bytes, its checksum, the collection's digest and a signed index
/// all cover the hash: a blob is authenticated by the same signature as the record.
///
/// ```swift
/// let record = try Record(json: Array(json.utf8))
/// for reference in try AttachmentReference.references(in: record) { print(reference.sha256, reference.size) }
/// ```
public struct AttachmentReference: Hashable, Sendable, CustomStringConvertible {
    /// The member that marks an object as a reference (`$` sorts it first in canonical JSON).
    package static let marker = "$attachment"
    /// The largest size a reference may state: 2^53 − 1, exact in every JSON reader.
    package static let maximumSize: UInt64 = (1 << 53) - 1
    /// The longest media type accepted (RFC 6838 allows 127 + "/" + 127 characters).
    package static let maximumTypeLength = 255

    /// 64 lowercase hexadecimal digits.
    public let sha256: String
    /// The blob's length in bytes.
    public let size: UInt64
    /// Its media type (`image/jpeg`), sent as the blob's `Content-Type`.
    public let type: String

    public init(sha256: String, size: UInt64, type: String) throws(AttachmentReferenceError) {
        guard Self.isSHA256(sha256) else { throw .badHash(sha256) }
        guard size <= Self.maximumSize else { throw .badSize(String(size)) }
        guard Self.isMediaType(type) else { throw .badType(type) }
        self.sha256 = sha256
        self.size = size
        self.type = type
    }

    /// The reference `value` states; nil when it is no reference (no `$attachment` member).
    /// Throws when it has the marker but is malformed: such a value is refused, never
    /// stored as plain data that a client would later read as a reference.
    public init?(_ value: JSONValue) throws(AttachmentReferenceError) {
        guard case .object(let members) = value, members.contains(where: { $0.key == Self.marker }) else { return nil }
        guard members.count == 3 else { throw .badShape("a reference has exactly \"\(Self.marker)\", \"size\" and \"type\"") }
        guard case .string(let hash)? = value[Self.marker] else { throw .badShape("\"\(Self.marker)\" must be a string") }
        guard case .number(let literal)? = value["size"], let size = UInt64(literal) else {
            throw .badSize(value["size"].map { CanonicalJSON.string($0) } ?? "missing")
        }
        guard case .string(let type)? = value["type"] else { throw .badShape("\"type\" must be a string") }
        try self.init(sha256: hash, size: size, type: type)
    }

    /// The reference as JSON, in canonical form: what `deltasnap attachment add` prints and
    /// what a record's member holds.
    public var json: JSONValue {
        .object([JSONMember(Self.marker, .string(sha256)), JSONMember("size", .number(String(size))), JSONMember("type", .string(type))])
    }

    public var description: String { CanonicalJSON.string(json) }

    /// Every reference `record` makes, in member order (duplicates kept once). A tombstone
    /// makes none.
    package static func references(in record: Record) throws -> [AttachmentReference] {
        guard !record.isHidden else { return [] }
        return try references(in: JSONReader(bytes: record.bytes).readValue())
    }

    /// Every reference the record `value` makes: a top-level member's value, or an element
    /// of a top-level array.
    package static func references(in value: JSONValue) throws(AttachmentReferenceError) -> [AttachmentReference] {
        guard case .object(let members) = value else { return [] }
        var found: [AttachmentReference] = []
        var seen = Set<String>()
        func add(_ candidate: JSONValue, member: String) throws(AttachmentReferenceError) {
            do {
                if let reference = try AttachmentReference(candidate), seen.insert(reference.sha256).inserted { found.append(reference) }
            } catch {
                throw error.in(member: member)
            }
        }
        for member in members {
            switch member.value {
            case .object: try add(member.value, member: member.key)
            case .array(let elements): for element in elements { try add(element, member: member.key) }
            default: continue
            }
        }
        return found
    }

    /// Whether a record's canonical `bytes` may hold a reference (contain `"$attachment"`):
    /// a record without it is skipped without parsing, which keeps a million-record import
    /// or scan at its old speed.
    package static func mayBeReferredTo(in bytes: UnsafeRawBufferPointer) -> Bool {
        let marker = quotedMarker
        let count = marker.count
        guard bytes.count >= count else { return false }
        var index = 0
        let last = bytes.count - count
        while index <= last {
            // `"$` is rare in JSON: the byte loop stops on few candidates.
            if bytes[index] == marker[0] && bytes[index + 1] == marker[1] {
                var matched = true
                for offset in 2..<count where bytes[index + offset] != marker[offset] {
                    matched = false
                    break
                }
                if matched { return true }
            }
            index += 1
        }
        return false
    }

    private static let quotedMarker = Array("\"\(marker)\"".utf8)

    /// 64 lowercase hexadecimal digits.
    package static func isSHA256(_ text: String) -> Bool {
        // Asked on every download: over the contiguous bytes, not through the generic
        // `allSatisfy` of `String.UTF8View` (a percent of a 20 KiB download's CPU).
        var text = text
        return text.withUTF8 { bytes in
            guard bytes.count == 64 else { return false }
            for byte in bytes where !((0x30...0x39).contains(byte) || (0x61...0x66).contains(byte)) { return false }
            return true
        }
    }

    /// `type/subtype`, optionally with parameters, in visible ASCII: what an HTTP
    /// `Content-Type` may carry without escaping.
    static func isMediaType(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= maximumTypeLength, utf8.allSatisfy({ (0x20...0x7E).contains($0) }) else { return false }
        let essence = text.split(separator: ";", maxSplits: 1)[0].trimmingCharacters(in: " ")
        let parts = essence.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 2 && parts.allSatisfy { !$0.isEmpty && !$0.contains(" ") }
    }
}

/// Why a value with the `$attachment` marker is no valid reference; says which member.
public struct AttachmentReferenceError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        case badHash, badSize, badType, badShape
    }

    public var kind: Kind
    public var detail: String
    /// The record member holding it, when known.
    public var member: String?

    public var description: String {
        let place = member.map { "member \"\($0)\": " } ?? ""
        return switch kind {
        case .badHash: "\(place)\"\(AttachmentReference.marker)\" must be 64 lowercase hex digits (a SHA-256), not \"\(detail)\""
        case .badSize: "\(place)\"size\" must be a whole number of bytes from 0 to 2^53-1, not \(detail)"
        case .badType: "\(place)\"type\" must be a media type such as image/jpeg, not \"\(detail)\""
        case .badShape: "\(place)\(detail)"
        }
    }

    static func badHash(_ detail: String) -> Self { Self(kind: .badHash, detail: detail) }
    static func badSize(_ detail: String) -> Self { Self(kind: .badSize, detail: detail) }
    static func badType(_ detail: String) -> Self { Self(kind: .badType, detail: detail) }
    static func badShape(_ detail: String) -> Self { Self(kind: .badShape, detail: detail) }

    func `in`(member: String) -> Self {
        var located = self
        located.member = member
        return located
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: Character) -> Substring {
        var trimmed = self
        while trimmed.first == set { trimmed = trimmed.dropFirst() }
        while trimmed.last == set { trimmed = trimmed.dropLast() }
        return trimmed
    }
}
