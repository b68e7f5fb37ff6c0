/// Rank keys for ordered lists: strings that sort by their bytes, so an item is moved, inserted
/// or deleted by writing one record's rank field — no other item's rank is rewritten, and
/// concurrent offline edits merge field by field like any other patch. Ties (two devices
/// that picked the same key) are ordered by record id.
///
/// Byte-compatible with rocicorp's `fractional-indexing` (`generateKeyBetween`,
/// `generateNKeysBetween`; David Greenspan's scheme): an integer part whose first character
/// (`a`–`z` positive, `A`–`Z` negative) gives its length, then a fraction without trailing
/// zeros. Written here because no package in the mirror implements it, and a JavaScript or
/// TypeScript client must produce the very same keys.
///
/// ```swift
/// let first = try FractionalRank.between(nil, nil)            // "a0"
/// let second = try FractionalRank.between(first, nil)         // "a1"
/// let middle = try FractionalRank.between(first, second)      // "a0V"
/// let three = try FractionalRank.n(keysBetween: nil, nil, count: 3)   // ["a0", "a1", "a2"]
/// var random = SystemRandomNumberGenerator()
/// let mine = try FractionalRank.between(first, second, jitter: &random)  // rarely equal to another device's
/// ```
public enum FractionalRank {
    /// The default alphabet, as rocicorp's `BASE_62_DIGITS`.
    public static let base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

    /// A key that sorts after `a` (nil: the start) and before `b` (nil: the end).
    /// `digits` is an ASCII alphabet in ascending byte order.
    public static func between(_ a: String?, _ b: String?, digits: String = base62) throws(FractionalRankError) -> String {
        let alphabet = try Alphabet(digits)
        let key = try keyBetween(a.map { Array($0.utf8) }, b.map { Array($0.utf8) }, alphabet)
        return String(decoding: key, as: UTF8.self)
    }

    /// `count` keys in ascending order between `a` and `b`: consecutive integers when one
    /// side is open, short keys spread between them otherwise.
    public static func n(keysBetween a: String?, _ b: String?, count: Int, digits: String = base62) throws(FractionalRankError) -> [String] {
        let alphabet = try Alphabet(digits)
        return try keysBetween(a.map { Array($0.utf8) }, b.map { Array($0.utf8) }, count: count, alphabet)
            .map { String(decoding: $0, as: UTF8.self) }
    }

    /// A key between `a` and `b` in one of 31³ = 29,791 disjoint gaps chosen at random, so
    /// two devices inserting at the same place offline pick the same key about once in
    /// 30,000 (keys grow by a few characters).
    public static func between(
        _ a: String?, _ b: String?, digits: String = base62, jitter random: inout some RandomNumberGenerator
    ) throws(FractionalRankError) -> String {
        let alphabet = try Alphabet(digits)
        var low = a.map { Array($0.utf8) }
        var high = b.map { Array($0.utf8) }
        for _ in 0..<3 {
            // 30 keys cut (low, high) into 31 gaps; go on in one of them.
            let cuts = try keysBetween(low, high, count: 30, alphabet)
            let gap = Int.random(in: 0...cuts.count, using: &random)
            if gap > 0 { low = cuts[gap - 1] }
            if gap < cuts.count { high = cuts[gap] }
        }
        return String(decoding: try keyBetween(low, high, alphabet), as: UTF8.self)
    }

    // MARK: - The scheme, on bytes

    struct Alphabet {
        let digits: [UInt8]
        var zero: UInt8 { digits[0] }
        var last: UInt8 { digits[digits.count - 1] }

        init(_ text: String) throws(FractionalRankError) {
            digits = Array(text.utf8)
            guard digits.count >= 2, digits.allSatisfy({ $0 < 0x80 }), zip(digits, digits.dropFirst()).allSatisfy({ $0 < $1 }) else {
                throw .invalidAlphabet(text)
            }
        }

        func value(_ digit: UInt8) throws(FractionalRankError) -> Int {
            guard let index = digits.firstIndex(of: digit) else { throw .invalidKey(String(decoding: [digit], as: UTF8.self)) }
            return index
        }
    }

    private static func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    private static func precedes(_ a: [UInt8], _ b: [UInt8]) -> Bool { a.lexicographicallyPrecedes(b) }

    /// A fraction strictly between `a` and `b` (nil: 1). Neither may end with the zero digit.
    static func midpoint(_ a: [UInt8], _ b: [UInt8]?, _ alphabet: Alphabet) throws(FractionalRankError) -> [UInt8] {
        let zero = alphabet.zero
        if let b, !precedes(a, b) { throw .notAscending(text(a), text(b)) }
        if a.last == zero || b?.last == zero { throw .trailingZero }
        if let b, !b.isEmpty {
            // The longest common prefix, `a` padded with zeros.
            var n = 0
            while n < b.count, (n < a.count ? a[n] : zero) == b[n] { n += 1 }
            if n > 0 { return Array(b[..<n]) + (try midpoint(Array(a.dropFirst(n)), Array(b.dropFirst(n)), alphabet)) }
        }
        let digitA = a.isEmpty ? 0 : try alphabet.value(a[0])
        var digitB = alphabet.digits.count
        if let b { digitB = b.isEmpty ? -1 : try alphabet.value(b[0]) }
        if digitB - digitA > 1 {
            // JavaScript's Math.round(0.5 * (digitA + digitB)): halves round up.
            return [alphabet.digits[(digitA + digitB + 1) / 2]]
        }
        if let b, b.count > 1 { return [b[0]] }
        return [alphabet.digits[digitA]] + (try midpoint(Array(a.dropFirst()), nil, alphabet))
    }

    /// How long the integer part is that starts with `head`.
    static func integerLength(_ head: UInt8) throws(FractionalRankError) -> Int {
        switch head {
        case UInt8(ascii: "a")...UInt8(ascii: "z"): Int(head - UInt8(ascii: "a")) + 2
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): Int(UInt8(ascii: "Z") - head) + 2
        default: throw .invalidHead(text([head]))
        }
    }

    static func integerPart(_ key: [UInt8]) throws(FractionalRankError) -> [UInt8] {
        guard let head = key.first else { throw .invalidKey("") }
        let length = try integerLength(head)
        guard length <= key.count else { throw .invalidKey(text(key)) }
        return Array(key[..<length])
    }

    static func isSmallestInteger(_ key: [UInt8], _ alphabet: Alphabet) -> Bool {
        key == [UInt8(ascii: "A")] + Array(repeating: alphabet.zero, count: 26)
    }

    static func validate(_ key: [UInt8], _ alphabet: Alphabet) throws(FractionalRankError) {
        if isSmallestInteger(key, alphabet) { throw .invalidKey(text(key)) }
        let integer = try integerPart(key)
        if key.count > integer.count, key.last == alphabet.zero { throw .invalidKey(text(key)) }
    }

    /// The next integer part (`up`) or the previous one, or nil past the largest (`z` and 26
    /// last digits) or below the smallest (`A` and 26 zeros). The two directions mirror each
    /// other: a carry wraps a digit to zero going up and to the last digit going down, and
    /// the head moves towards longer integers away from the `Z`/`a` boundary.
    static func step(_ integer: [UInt8], up: Bool, _ alphabet: Alphabet) throws(FractionalRankError) -> [UInt8]? {
        guard integer.count == (try integerLength(integer[0])) else { throw .invalidKey(text(integer)) }
        let head = integer[0]
        let wrapped = up ? alphabet.zero : alphabet.last
        var digits = Array(integer.dropFirst())
        var carry = true
        var index = digits.count - 1
        while carry && index >= 0 {
            let value = try alphabet.value(digits[index]) + (up ? 1 : -1)
            if value == (up ? alphabet.digits.count : -1) {
                digits[index] = wrapped
            } else {
                digits[index] = alphabet.digits[value]
                carry = false
            }
            index -= 1
        }
        guard carry else { return [head] + digits }
        // Across the boundary between negative (`A`–`Z`) and positive (`a`–`z`) heads.
        if up && head == UInt8(ascii: "Z") { return [UInt8(ascii: "a"), alphabet.zero] }
        if !up && head == UInt8(ascii: "a") { return [UInt8(ascii: "Z"), alphabet.last] }
        if head == (up ? UInt8(ascii: "z") : UInt8(ascii: "A")) { return nil }
        let nextHead = up ? head + 1 : head - 1
        if up ? nextHead > UInt8(ascii: "a") : nextHead < UInt8(ascii: "Z") { digits.append(wrapped) } else { digits.removeLast() }
        return [nextHead] + digits
    }

    static func keyBetween(_ a: [UInt8]?, _ b: [UInt8]?, _ alphabet: Alphabet) throws(FractionalRankError) -> [UInt8] {
        if let a { try validate(a, alphabet) }
        if let b { try validate(b, alphabet) }
        if let a, let b, !precedes(a, b) { throw .notAscending(text(a), text(b)) }
        guard let a else {
            guard let b else { return [UInt8(ascii: "a"), alphabet.zero] }
            let integer = try integerPart(b)
            let fraction = Array(b.dropFirst(integer.count))
            if isSmallestInteger(integer, alphabet) { return integer + (try midpoint([], fraction, alphabet)) }
            if precedes(integer, b) { return integer }
            guard let previous = try step(integer, up: false, alphabet) else { throw .exhausted }
            return previous
        }
        let integerA = try integerPart(a)
        let fractionA = Array(a.dropFirst(integerA.count))
        guard let b else {
            guard let next = try step(integerA, up: true, alphabet) else { return integerA + (try midpoint(fractionA, nil, alphabet)) }
            return next
        }
        let integerB = try integerPart(b)
        if integerA == integerB { return integerA + (try midpoint(fractionA, Array(b.dropFirst(integerB.count)), alphabet)) }
        guard let next = try step(integerA, up: true, alphabet) else { throw .exhausted }
        if precedes(next, b) { return next }
        return integerA + (try midpoint(fractionA, nil, alphabet))
    }

    static func keysBetween(_ a: [UInt8]?, _ b: [UInt8]?, count: Int, _ alphabet: Alphabet) throws(FractionalRankError) -> [[UInt8]] {
        if count <= 0 { return [] }
        if count == 1 { return [try keyBetween(a, b, alphabet)] }
        if a == nil || b == nil {
            // An open end: consecutive integers walking away from the closed one (up from `a`
            // when `b` is open, also when both are).
            let upward = b == nil
            var key = try keyBetween(a, b, alphabet)
            var keys = [key]
            for _ in 1..<count {
                key = upward ? try keyBetween(key, nil, alphabet) : try keyBetween(nil, key, alphabet)
                keys.append(key)
            }
            return upward ? keys : keys.reversed()
        }
        let half = count / 2
        let middle = try keyBetween(a, b, alphabet)
        return try keysBetween(a, middle, count: half, alphabet) + [middle] + (try keysBetween(middle, b, count: count - half - 1, alphabet))
    }
}

/// Why a rank key could not be made; the messages are rocicorp's, so both clients report alike.
public enum FractionalRankError: Error, Equatable, CustomStringConvertible {
    /// Not a key of this scheme (too short for its head, a trailing zero digit, the smallest integer).
    case invalidKey(String)
    /// A first character other than `a`–`z` or `A`–`Z`.
    case invalidHead(String)
    /// The lower bound is not below the upper one.
    case notAscending(String, String)
    /// A fraction ending with the zero digit.
    case trailingZero
    /// No key exists beyond the largest (or below the smallest) integer.
    case exhausted
    /// `digits` is not an ASCII alphabet of at least two characters in ascending order.
    case invalidAlphabet(String)

    public var description: String {
        switch self {
        case .invalidKey(let key): "invalid order key: \(key)"
        case .invalidHead(let head): "invalid order key head: \(head)"
        case .notAscending(let a, let b): "\(a) >= \(b)"
        case .trailingZero: "trailing zero"
        case .exhausted: "cannot increment or decrement any more"
        case .invalidAlphabet(let digits): "invalid digits \"\(digits)\": use at least two ASCII characters in ascending order"
        }
    }
}
