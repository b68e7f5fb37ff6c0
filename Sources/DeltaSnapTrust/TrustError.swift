/// Why signed data was refused. Every case leaves the replica as it was.
public enum TrustError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A key file is missing, unreadable or not a key of the expected kind.
    case keyFile(path: String, reason: String)
    /// The index document is not what docs/PROTOCOL.md §8 describes.
    case malformedIndex(String)
    /// The index carries no signature at all.
    case unsigned
    /// No signature is by a trusted key (`keyIDs`: the keys that signed it).
    case untrustedSigner(keyIDs: [String])
    /// A signature by a trusted key does not verify: the index was changed after signing.
    case badSignature(keyID: String)
    /// The index expired (a mirror may be freezing the client on old data).
    case expired(expires: Int64, now: Int64)
    /// The index is older than one already verified (a replay to roll the client back).
    case rollback(sequence: UInt64, held: UInt64)
    /// The index does not list the collection.
    case collectionNotListed(String)
    /// The state applied does not match what the index signs.
    case stateMismatch(collection: String, reason: String)

    public var description: String {
        switch self {
        case .keyFile(let path, let reason): "key file \(path): \(reason)"
        case .malformedIndex(let reason): "the index is malformed: \(reason)"
        case .unsigned: "the index carries no signature"
        case .untrustedSigner(let ids): "the index is not signed by a trusted key (signed by: \(ids.isEmpty ? "nobody" : ids.joined(separator: ", ")))"
        case .badSignature(let id): "the signature by key \(id) does not verify: the index was altered"
        case .expired(let expires, let now): "the index expired \(now - expires) s ago: the data is unverifiably old"
        case .rollback(let sequence, let held): "the index has sequence \(sequence), older than the \(held) already verified (a replay)"
        case .collectionNotListed(let name): "the index does not list collection \"\(name)\""
        case .stateMismatch(let collection, let reason): "\(collection): the data does not match the signed index (\(reason))"
        }
    }
}
