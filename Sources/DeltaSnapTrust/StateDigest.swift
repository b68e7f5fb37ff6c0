import Crypto
import CryptoExtras
import DeltaSnapCore
import Foundation

/// A cryptographic digest of a collection's whole visible state that can be maintained in
/// O(changed records): LtHash16 ("Securing Update Propagation with Homomorphic Hashing",
/// Lewi et al., 2019) over every visible record.
///
/// Each record maps to 1,024 16-bit lanes; the state is their lane-wise sum modulo 2^16, so a
/// record is added when it appears and subtracted when it is replaced or hidden, in any
/// order. Unlike the XXH64 sum of ``DeltaSnapCore/StateChecksum`` (forgeable with ~2^32
/// work), finding another set of records with the same LtHash16 is as hard as the lattice
/// problem the paper reduces it to. What the signed index carries is ``fingerprint``, the
/// SHA-256 of the 2,048 lane bytes.
///
/// Construction (docs/PROTOCOL.md §8.2, byte for byte):
/// 1. `h = SHA-256("deltasnap-record-v1" 0x00 collection 0x00 id 0x00 canonical-bytes)`
/// 2. lanes = the ChaCha20 key stream (RFC 8439) under key `h` and an all-zero 12-byte nonce
///    from block counter 1 — the 2,048-byte ciphertext ChaCha20-Poly1305 gives sealing 2,048
///    zero bytes with no associated data (tag dropped) — read as 1,024 little-endian `UInt16`.
///
/// ChaCha20 is the expansion function because it is a stable API in swift-crypto and
/// CryptoKit and in every language's standard crypto library (as the AEAD's ciphertext where
/// the bare cipher is not offered, as in WebCrypto); the paper's BLAKE2x is not.
///
/// ```swift
/// var digest = StateDigest.empty
/// digest.add(collection: "countries", id: "AD", canonical: record.bytes)
/// digest.remove(collection: "countries", id: "AD", canonical: old.bytes)
/// print(digest.fingerprint)   // 64 hex digits
/// ```
package struct StateDigest: Equatable, Sendable {
    package static let laneCount = 1024
    package static let byteCount = 2048
    static let recordDomain = Array("deltasnap-record-v1".utf8)

    private(set) var lanes: [UInt16]

    /// The digest of an empty collection: every lane zero.
    package static let empty = StateDigest(lanes: [UInt16](repeating: 0, count: laneCount))

    private init(lanes: [UInt16]) { self.lanes = lanes }

    /// A digest from its 2,048 little-endian lane bytes (as ``bytes`` writes them); `nil`
    /// for any other length.
    package init?(bytes: some Collection<UInt8>) {
        guard bytes.count == Self.byteCount else { return nil }
        let array = Array(bytes)
        lanes = (0..<Self.laneCount).map { UInt16(array[2 * $0]) | UInt16(array[2 * $0 + 1]) << 8 }
    }

    /// The 2,048 lane bytes, little-endian.
    package var bytes: [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.byteCount)
        for (index, lane) in lanes.enumerated() {
            out[2 * index] = UInt8(truncatingIfNeeded: lane)
            out[2 * index + 1] = UInt8(truncatingIfNeeded: lane >> 8)
        }
        return out
    }

    /// Lowercase hex SHA-256 of ``bytes``: what a signed index names.
    package var fingerprint: String { Hex.encode(SHA256.hash(data: bytes)) }

    /// Adds a visible record (its canonical bytes, as stored and sent).
    package mutating func add(collection: String, id: String, canonical: some ContiguousBytes) {
        combine(collection: collection, id: id, canonical: canonical, subtracting: false)
    }

    /// Removes a record that was visible (replaced or hidden).
    package mutating func remove(collection: String, id: String, canonical: some ContiguousBytes) {
        combine(collection: collection, id: id, canonical: canonical, subtracting: true)
    }

    package mutating func add(_ other: StateDigest) {
        for index in 0..<Self.laneCount { lanes[index] &+= other.lanes[index] }
    }

    private mutating func combine(collection: String, id: String, canonical: some ContiguousBytes, subtracting: Bool) {
        let expanded = Self.expand(collection: collection, id: id, canonical: canonical)
        expanded.withUnsafeBytes { raw in
            lanes.withUnsafeMutableBufferPointer { lanes in
                // Two loops rather than a branch inside one, so each is a plain vector loop.
                if subtracting {
                    for index in 0..<Self.laneCount {
                        lanes[index] &-= UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: 2 * index, as: UInt16.self))
                    }
                } else {
                    for index in 0..<Self.laneCount {
                        lanes[index] &+= UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: 2 * index, as: UInt16.self))
                    }
                }
            }
        }
    }

    private static let zeros = [UInt8](repeating: 0, count: byteCount)
    private static let zeroNonce = try! Insecure.ChaCha20CTR.Nonce(data: [UInt8](repeating: 0, count: 12))
    /// RFC 8439 §2.8: ChaCha20-Poly1305 spends block 0 on the Poly1305 key and encrypts from
    /// block 1, so its ciphertext of zeros is the ChaCha20 key stream from counter 1.
    private static let firstCiphertextBlock = try! Insecure.ChaCha20CTR.Counter(offset: 1)

    /// The record's 2,048 pseudo-random lane bytes: the ciphertext ChaCha20-Poly1305 would
    /// give, made by ChaCha20 alone — sealing also computed a Poly1305 tag over the 2,048
    /// bytes, only to drop it (half the digest's cost on a 100,000-record write).
    static func expand(collection: String, id: String, canonical: some ContiguousBytes) -> Data {
        var hasher = SHA256()
        hasher.update(data: recordDomain)
        hasher.update(data: [0])
        // A review workspace is digested as the collection it will be published as.
        update(&hasher, ReviewWorkspace.published(of: collection) ?? collection)
        hasher.update(data: [0])
        update(&hasher, id)
        hasher.update(data: [0])
        canonical.withUnsafeBytes { hasher.update(bufferPointer: $0) }
        let key = SymmetricKey(data: hasher.finalize())
        // Cannot fail for a 32-byte key, a 12-byte nonce and a 2,048-byte message.
        return try! Insecure.ChaCha20CTR.encrypt(zeros, using: key, counter: firstCiphertextBlock, nonce: zeroNonce)
    }

    /// Hashes a string's UTF-8 without copying it out when it is stored contiguously.
    private static func update(_ hasher: inout SHA256, _ text: String) {
        var text = text
        text.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
    }
}
