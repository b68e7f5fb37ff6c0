import DeltaSnapCore

/// Seeded, realistic synthetic records (~300 bytes, with non-ASCII text) for tests and
/// benchmarks: the same seed and index always give the same record.
///
/// ```swift
/// let generator = SyntheticRecords(seed: 42)
/// let line = generator.json(index: 7)          // {"city":"Zürich",…,"id":"r0000007",…}
/// let record = generator.record(index: 7, revision: 1)   // a changed version of it
/// ```
package struct SyntheticRecords: Sendable {
    package var seed: UInt64

    package init(seed: UInt64 = 1) {
        self.seed = seed
    }

    private static let syllables = ["ka", "lo", "mé", "ri", "sa", "tø", "vu", "zä", "ñe", "şi", "ro", "ba", "dü", "fi", "gå", "hi"]
    private static let cities = ["Zürich", "São Paulo", "Kraków", "Malmö", "Reykjavík", "Łódź", "Besançon", "Ljubljana", "Córdoba", "İzmir", "Tōkyō", "Nuuk"]
    private static let tags = ["nouveauté", "größe", "città", "niño", "øko", "ciudad", "straße", "été", "ölçü", "ışık"]

    /// The id of record `index`: `r` and seven digits, so ids sort in index order.
    package static func id(_ index: Int) -> String {
        let digits = String(index)
        return "r" + String(repeating: "0", count: max(0, 7 - digits.count)) + digits
    }

    /// The record at `index`; a different `revision` gives a changed record with the same id.
    package func value(index: Int, revision: Int = 0) -> JSONValue {
        // Mixed, not just offset: offset seeds would make record i+1 replay record i's draws.
        var random = SplitMix64(seed: SplitMix64.mix(seed ^ SplitMix64.mix(UInt64(index)) ^ SplitMix64.mix(UInt64(revision) &+ 0x5EED)))
        func word(_ count: Int) -> String {
            (0..<count).map { _ in Self.syllables[Int(random.next() % UInt64(Self.syllables.count))] }.joined()
        }
        let name = word(2).capitalized + " " + word(3).capitalized
        let description = (0..<14).map { _ in word(Int(random.next() % 3) + 1) }.joined(separator: " ")
        let tagCount = Int(random.next() % 3) + 1
        let tags = (0..<tagCount).map { _ in JSONValue.string(Self.tags[Int(random.next() % UInt64(Self.tags.count))]) }
        let price = String(Int(random.next() % 100_000)) + "." + String(Int(random.next() % 90) + 10)
        return .object([
            JSONMember("active", .bool(random.next() % 5 != 0)),
            JSONMember("city", .string(Self.cities[Int(random.next() % UInt64(Self.cities.count))])),
            JSONMember("description", .string(description)),
            JSONMember("id", .string(Self.id(index))),
            JSONMember("name", .string(name)),
            JSONMember("owner", .object([
                JSONMember("email", .string(word(2) + "@" + word(2) + ".example")),
                JSONMember("name", .string(word(2).capitalized)),
            ])),
            JSONMember("price", .number(price)),
            JSONMember("rating", .number(String(Int(random.next() % 50)))),
            JSONMember("revision", .number(String(revision))),
            JSONMember("stock", .number(String(Int(random.next() % 10_000)))),
            JSONMember("tags", .array(tags)),
        ])
    }

    /// The canonical record at `index`.
    package func record(index: Int, revision: Int = 0) -> Record {
        // The value is built valid by construction.
        try! Record(parsing: value(index: index, revision: revision))
    }

    /// One NDJSON line (canonical JSON, no newline).
    package func json(index: Int, revision: Int = 0) -> [UInt8] {
        CanonicalJSON.bytes(value(index: index, revision: revision))
    }
}

/// SplitMix64: a tiny, fast, seedable generator (the standard library's is not seedable).
package struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    package init(seed: UInt64) { state = seed }
    /// SplitMix64's output function: a strong 64-bit mixer.
    package static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension String {
    fileprivate var capitalized: String { prefix(1).uppercased() + dropFirst() }
}
