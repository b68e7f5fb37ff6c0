/// Bytes for test files: no stretch of them repeats elsewhere, so a transfer resumed at the
/// wrong offset cannot go unnoticed.
///
/// Made eight at a time through the array's own storage: a per-byte `map` over tens of
/// megabytes kept a thread of the cooperative pool (two on this machine) busy for seconds in
/// a debug build, and every in-process test server of the run stalled with it.
///
/// ```swift
/// FileManager.default.createFile(atPath: file, contents: Data(noiseBytes(32 << 20, seed: 5)))
/// ```
package func noiseBytes(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        var state = seed &* 0x9E37_79B9_7F4A_7C15
        var index = 0
        while index < count {
            // SplitMix64, inlined: a debug build calls nothing per word.
            state &+= 0x9E37_79B9_7F4A_7C15
            var word = state
            word = (word ^ (word >> 30)) &* 0xBF58_476D_1CE4_E5B9
            word = (word ^ (word >> 27)) &* 0x94D0_49BB_1331_11EB
            word ^= word >> 31
            let take = min(8, count - index)
            for byte in 0..<take { buffer[index + byte] = UInt8(truncatingIfNeeded: word >> (8 * UInt64(byte))) }
            index += take
        }
        initialized = count
    }
}
