import DeltaSnapCore
import DeltaSnapSynthetic
import Crypto
import Foundation
import Testing

@testable import DeltaSnapTrust

@Suite struct StateDigestTests {
    /// The expansion is made with ChaCha20 alone; what PROTOCOL §8.2 documents (and other
    /// clients compute) is the ChaCha20-Poly1305 ciphertext of 2,048 zero bytes. The two agree
    /// for records of every size, ids with non-ASCII characters and review workspaces.
    @Test func expansionIsTheDocumentedSealedCiphertext() throws {
        let generator = SyntheticRecords(seed: 3)
        for (index, collection) in ["c", "catalogue/partitions/ü", ReviewWorkspace.collection + "/catalogue"].enumerated() {
            for size in [0, 1, 63, 64, 200, 5_000] {
                let id = "id-\(size)-é"
                let canonical = Array(generator.record(index: size + index, revision: 1).bytes.prefix(size))
                var hasher = SHA256()
                hasher.update(data: Array("deltasnap-record-v1".utf8) + [0])
                hasher.update(data: Array((ReviewWorkspace.published(of: collection) ?? collection).utf8) + [0])
                hasher.update(data: Array(id.utf8) + [0] + canonical)
                let sealed = try ChaChaPoly.seal(
                    [UInt8](repeating: 0, count: 2048), using: SymmetricKey(data: hasher.finalize()),
                    nonce: ChaChaPoly.Nonce(data: [UInt8](repeating: 0, count: 12)))
                #expect(StateDigest.expand(collection: collection, id: id, canonical: canonical) == sealed.ciphertext)
            }
        }
    }

    /// 10,000 random upserts, hides and un-hides maintained incrementally, compared with a
    /// digest recomputed from the final visible set.
    @Test func incrementalDigestEqualsRecomputation() {
        let generator = SyntheticRecords(seed: 7)
        var random = SeededRandom(seed: 99)
        var visible: [String: [UInt8]] = [:]
        var hiddenBodies: [String: [UInt8]] = [:]
        var digest = StateDigest.empty
        for step in 0..<10_000 {
            let index = Int(random.next() % 600)
            let id = SyntheticRecords.id(index)
            switch random.next() % 3 {
            case 0:  // upsert (a new revision)
                let bytes = generator.record(index: index, revision: step).bytes
                if let old = visible[id] { digest.remove(collection: "c", id: id, canonical: old) }
                digest.add(collection: "c", id: id, canonical: bytes)
                visible[id] = bytes
            case 1:  // hide
                if let old = visible.removeValue(forKey: id) {
                    digest.remove(collection: "c", id: id, canonical: old)
                    hiddenBodies[id] = old
                }
            default:  // un-hide the last hidden value
                if visible[id] == nil, let old = hiddenBodies.removeValue(forKey: id) {
                    digest.add(collection: "c", id: id, canonical: old)
                    visible[id] = old
                }
            }
        }
        var recomputed = StateDigest.empty
        for (id, bytes) in visible.shuffled(using: &random) { recomputed.add(collection: "c", id: id, canonical: bytes) }
        #expect(digest == recomputed)
        #expect(digest != .empty)
        #expect(digest.fingerprint == recomputed.fingerprint)
    }

    @Test func digestDependsOnCollectionIdAndBytes() {
        let bytes = Array(#"{"id":"AD"}"#.utf8)
        var a = StateDigest.empty
        a.add(collection: "a", id: "AD", canonical: bytes)
        var b = StateDigest.empty
        b.add(collection: "b", id: "AD", canonical: bytes)
        var c = StateDigest.empty
        c.add(collection: "a", id: "AD", canonical: Array(#"{"id":"AD","x":1}"#.utf8))
        #expect(a != b)
        #expect(a != c)
        a.remove(collection: "a", id: "AD", canonical: bytes)
        #expect(a == .empty)
    }

    @Test func bytesRoundTrip() {
        var digest = StateDigest.empty
        digest.add(collection: "c", id: "x", canonical: Array(#"{"id":"x"}"#.utf8))
        #expect(StateDigest(bytes: digest.bytes) == digest)
        #expect(StateDigest(bytes: [UInt8](repeating: 0, count: 10)) == nil)
        #expect(StateDigest.empty.fingerprint == "e5a00aa9991ac8a5ee3109844d84a55583bd20572ad3ffcd42792f3c36b183ad")  // SHA-256 of 2,048 zero bytes
    }

    /// The construction pinned byte for byte (docs/PROTOCOL.md §8.2 quotes these values; they
    /// were computed independently with Python's `hashlib` and `cryptography`), so a change to
    /// it cannot go unnoticed.
    @Test func knownAnswer() {
        var digest = StateDigest.empty
        digest.add(collection: "countries", id: "AD", canonical: Array(#"{"id":"AD","name":"Andorra"}"#.utf8))
        let bytes = digest.bytes
        #expect(Array(bytes.prefix(8)) == KnownAnswer.firstEightLaneBytes)
        #expect(digest.fingerprint == KnownAnswer.fingerprint)
    }
}

enum KnownAnswer {
    static let firstEightLaneBytes: [UInt8] = [220, 98, 188, 210, 254, 61, 33, 157]
    static let fingerprint = "37d6ec8def50c19f17ba3d9ac7a6be782e92d90d58ee9bebc256e85ca717152e"
}

/// SplitMix64: a seeded generator, so a failure replays.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
