import DeltaSnapCore
import DeltaSnapSynthetic
import Testing

/// Rank keys byte for byte as rocicorp's `fractional-indexing` makes them (its published test
/// vectors), so a Swift and a TypeScript client that insert at the same place agree.
@Suite struct FractionalRankTests {
    @Test(arguments: [
        (nil, nil, "a0"), (nil, "a0", "Zz"), (nil, "Zz", "Zy"), ("a0", nil, "a1"), ("a1", nil, "a2"),
        ("a0", "a1", "a0V"), ("a1", "a2", "a1V"), ("a0V", "a1", "a0l"), ("Zz", "a0", "ZzV"), ("Zz", "a1", "a0"),
        (nil, "Y00", "Xzzz"), ("bzz", nil, "c000"), ("a0", "a0V", "a0G"), ("a0", "a0G", "a08"), ("b125", "b129", "b127"),
        ("a0", "a1V", "a1"), ("Zz", "a01", "a0"), (nil, "a0V", "a0"), (nil, "b999", "b99"),
        (nil, "A000000000000000000000000001", "A000000000000000000000000000V"),
        ("zzzzzzzzzzzzzzzzzzzzzzzzzzy", nil, "zzzzzzzzzzzzzzzzzzzzzzzzzzz"),
        ("zzzzzzzzzzzzzzzzzzzzzzzzzzz", nil, "zzzzzzzzzzzzzzzzzzzzzzzzzzzV"),
    ] as [(String?, String?, String)])
    func keyBetweenMatchesTheReference(_ a: String?, _ b: String?, _ expected: String) throws {
        #expect(try FractionalRank.between(a, b) == expected)
    }

    @Test(arguments: [
        (nil, "A00000000000000000000000000", "invalid order key: A00000000000000000000000000"),
        ("a00", nil, "invalid order key: a00"), ("a00", "a1", "invalid order key: a00"),
        ("0", "1", "invalid order key head: 0"), ("a1", "a0", "a1 >= a0"),
    ] as [(String?, String?, String)])
    func badBoundsAreRefusedWithTheReferenceMessage(_ a: String?, _ b: String?, _ message: String) {
        #expect(throws: (any Error).self) { try FractionalRank.between(a, b) }
        do {
            _ = try FractionalRank.between(a, b)
        } catch {
            #expect("\(error)" == message)
        }
    }

    @Test func manyKeysMatchTheReferenceInBase10() throws {
        let digits = "0123456789"
        #expect(try FractionalRank.n(keysBetween: nil, nil, count: 5, digits: digits) == ["a0", "a1", "a2", "a3", "a4"])
        #expect(try FractionalRank.n(keysBetween: "a4", nil, count: 10, digits: digits).joined(separator: " ") == "a5 a6 a7 a8 a9 b00 b01 b02 b03 b04")
        #expect(try FractionalRank.n(keysBetween: nil, "a0", count: 5, digits: digits) == ["Z5", "Z6", "Z7", "Z8", "Z9"])
        #expect(try FractionalRank.n(keysBetween: "a0", "a2", count: 20, digits: digits).joined(separator: " ")
            == "a01 a02 a03 a035 a04 a05 a06 a07 a08 a09 a1 a11 a12 a13 a14 a15 a16 a17 a18 a19")
    }

    /// A thousand inserts at random places: every key between its neighbours, the list sorted
    /// by bytes; jittered keys too.
    @Test func randomInsertsStaySortedByBytes() throws {
        var generator = SplitMix64(seed: 7)
        var list: [String] = []
        for round in 0..<1000 {
            let position = Int.random(in: 0...list.count, using: &generator)
            let a = position > 0 ? list[position - 1] : nil
            let b = position < list.count ? list[position] : nil
            let key = round.isMultiple(of: 2) ? try FractionalRank.between(a, b) : try FractionalRank.between(a, b, jitter: &generator)
            #expect(a.map { Array($0.utf8).lexicographicallyPrecedes(Array(key.utf8)) } ?? true)
            #expect(b.map { Array(key.utf8).lexicographicallyPrecedes(Array($0.utf8)) } ?? true)
            list.insert(key, at: position)
        }
        #expect(list == list.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
    }

    /// Two devices inserting at the same place with jitter rarely pick the same key.
    @Test func jitterSpreadsKeysInsertedAtOnePlace() throws {
        var generator = SplitMix64(seed: 1)
        let keys = try (0..<200).map { _ in try FractionalRank.between("a0", "a1", jitter: &generator) }
        // 200 draws among 29,791 gaps: under one collision expected.
        #expect(Set(keys).count >= 196, "\(200 - Set(keys).count) collisions")
        #expect(keys.allSatisfy { $0.utf8.count <= 8 }, "\(keys.map(\.utf8.count).max() ?? 0) characters")
        #expect(keys.allSatisfy { $0 > "a0" && $0 < "a1" })
    }
}
