import DeltaSnapCore
import Foundation

/// Writes the canonical bytes of a ``SignedIndex`` (docs/PROTOCOL.md §8.1) straight from its
/// fields, with no JSON tree in between, and from entries serialised earlier.
///
/// An entry — a token with the digest of its state — never changes once stated, so a server
/// keeps each entry's bytes (``member(of:)``) and assembles a view of 1,000 partitions of
/// which one changed by serialising that one and copying the rest.
///
/// ```swift
/// let members = index.entries.map(IndexDocument.member(of:))   // kept by the caller
/// let object = IndexDocument.index(sequence: 7, issued: now, expires: now + 3600, subject: "alice", members: members)
/// let document = IndexDocument.signed(index: object, keys: keys)  // served at GET /v1/index
/// ```
package enum IndexDocument {
    /// One entry as a member of the index's `collections` object: `"NAME":{"count":…,…}`,
    /// its fields in canonical (UTF-8) order.
    package static func member(of entry: SignedIndex.Entry) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(entry.collection.utf8.count + entry.digest.utf8.count + entry.token.utf8.count + 140)
        CanonicalJSON.writeString(entry.collection, into: &out)
        out += #":{"count":"#.utf8
        out += String(entry.count).utf8
        out += #","digest":"#.utf8
        CanonicalJSON.writeString(entry.digest, into: &out)
        out += #","floor":"#.utf8
        out += String(entry.floor).utf8
        out += #","lastModified":"#.utf8
        CanonicalJSON.writeString(entry.lastModified, into: &out)
        out += #","token":"#.utf8
        CanonicalJSON.writeString(entry.token, into: &out)
        out += #","version":"#.utf8
        out += String(entry.version).utf8
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The canonical index object, the bytes a signature covers after the domain line.
    /// `members` are ``member(of:)``'s bytes in the UTF-8 order of their collection names.
    package static func index(sequence: UInt64, issued: Int64, expires: Int64, subject: String?, members: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(members.reduce(160) { $0 + $1.count + 1 } + (subject?.utf8.count ?? 0))
        out += #"{"collections":{"#.utf8
        for (position, member) in members.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            out += member
        }
        out += #"},"expires":"#.utf8
        out += String(expires).utf8
        out += #","format":"#.utf8
        out += String(SignedIndex.format).utf8
        out += #","issued":"#.utf8
        out += String(issued).utf8
        out += #","sequence":"#.utf8
        out += String(sequence).utf8
        if let subject {
            out += #","subject":"#.utf8
            CanonicalJSON.writeString(subject, into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The document for the index object `index`, signed by every key in `keys` (several
    /// during a key rotation; none: an empty `signatures`).
    package static func signed(index: [UInt8], keys: [IndexSigningKey]) -> [UInt8] {
        guard !keys.isEmpty else { return document(index: index, signatures: []) }
        let message = SignedIndex.signingDomain + index
        return document(index: index, signatures: keys.map { SignedIndex.Signature(keyID: $0.publicKey.id, bytes: $0.signature(for: message)) })
    }

    /// `{"index":<index>,"signatures":[{"key":…,"signature":<base64>},…]}` and a newline.
    static func document(index: [UInt8], signatures: [SignedIndex.Signature]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(index.count + 40 + signatures.count * 140)
        out += #"{"index":"#.utf8
        out += index
        out += #","signatures":["#.utf8
        for (position, signature) in signatures.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            out += #"{"key":"#.utf8
            CanonicalJSON.writeString(signature.keyID, into: &out)
            out += #","signature":"#.utf8
            CanonicalJSON.writeString(Data(signature.bytes).base64EncodedString(), into: &out)
            out.append(UInt8(ascii: "}"))
        }
        out += "]}\n".utf8
        return out
    }
}
