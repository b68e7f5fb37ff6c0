/// XXH64 (seed 0), the 64-bit record hash behind ``StateChecksum``.
///
/// Hand-written because Foundation has no fast non-cryptographic hash and the protocol
/// needs one that every language has a library for (xxHash's XXH64 is in all of them).
/// Verified against the reference implementation's test vectors in the tests.
package enum XXH64 {
    private static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
    private static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    private static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
    private static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
    private static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

    /// The XXH64 hash of `bytes` with seed 0.
    package static func hash(_ bytes: [UInt8]) -> UInt64 {
        bytes.withUnsafeBytes { hash($0) }
    }

    /// The XXH64 hash of `bytes` with `seed`.
    package static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        let length = bytes.count
        var index = 0
        var hash: UInt64
        @inline(__always) func read64(_ at: Int) -> UInt64 { UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self)) }
        @inline(__always) func read32(_ at: Int) -> UInt32 { UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self)) }

        if length >= 32 {
            var v1 = seed &+ prime1 &+ prime2
            var v2 = seed &+ prime2
            var v3 = seed
            var v4 = seed &- prime1
            while index + 32 <= length {
                v1 = round(v1, read64(index))
                v2 = round(v2, read64(index + 8))
                v3 = round(v3, read64(index + 16))
                v4 = round(v4, read64(index + 24))
                index += 32
            }
            hash = v1.rotated(1) &+ v2.rotated(7) &+ v3.rotated(12) &+ v4.rotated(18)
            hash = merge(hash, v1)
            hash = merge(hash, v2)
            hash = merge(hash, v3)
            hash = merge(hash, v4)
        } else {
            hash = seed &+ prime5
        }
        hash &+= UInt64(length)
        while index + 8 <= length {
            hash ^= round(0, read64(index))
            hash = hash.rotated(27) &* prime1 &+ prime4
            index += 8
        }
        if index + 4 <= length {
            hash ^= UInt64(read32(index)) &* prime1
            hash = hash.rotated(23) &* prime2 &+ prime3
            index += 4
        }
        while index < length {
            hash ^= UInt64(bytes[index]) &* prime5
            hash = hash.rotated(11) &* prime1
            index += 1
        }
        hash ^= hash >> 33
        hash &*= prime2
        hash ^= hash >> 29
        hash &*= prime3
        hash ^= hash >> 32
        return hash
    }

    @inline(__always)
    private static func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
        (accumulator &+ input &* prime2).rotated(31) &* prime1
    }

    @inline(__always)
    private static func merge(_ accumulator: UInt64, _ value: UInt64) -> UInt64 {
        (accumulator ^ round(0, value)) &* prime1 &+ prime4
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotated(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
