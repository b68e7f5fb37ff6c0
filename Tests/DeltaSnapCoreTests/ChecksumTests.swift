import DeltaSnapCore
import Testing

@Suite struct ChecksumTests {
    struct Vector: Sendable, CustomTestStringConvertible {
        var bytes: [UInt8]
        var hash: UInt64
        var testDescription: String { "\(bytes.count) bytes" }
    }

    // Reference values from the xxHash reference implementation (python-xxhash, seed 0).
    static let vectors: [Vector] = [
        Vector(bytes: [], hash: 0xEF46_DB37_51D8_E999),
        Vector(bytes: Array("a".utf8), hash: 0xD24E_C4F1_A98C_6E5B),
        Vector(bytes: Array("abc".utf8), hash: 0x44BC_2CF5_AD77_0999),
        Vector(bytes: Array(#"{"id":"AD"}"#.utf8), hash: 0x3FB3_DACE_2053_70DC),
        Vector(bytes: (0..<512).map { UInt8($0 % 256) }, hash: 0x7B3B_FCAA_C034_8AC0),
        Vector(bytes: Array("Ünïcödé 🇦🇩 records are longer than thirty-two bytes".utf8), hash: 0xCC6D_9966_8552_395A),
    ]

    @Test(arguments: vectors)
    func xxh64MatchesTheReference(_ vector: Vector) {
        #expect(XXH64.hash(vector.bytes) == vector.hash)
    }

    @Test func checksumIsOrderIndependentAndReversible() throws {
        let records = try (0..<50).map { try Record(json: Array(#"{"id":"r\#($0)","v":\#($0 * 7)}"#.utf8)) }
        var forward = StateChecksum.empty
        records.forEach { forward.add($0) }
        var backward = StateChecksum.empty
        records.reversed().forEach { backward.add($0) }
        #expect(forward == backward)
        records.forEach { forward.remove($0) }
        #expect(forward == .empty)
    }

    @Test func formatsAsSixteenHexDigitsAndParsesBack() {
        let checksum = StateChecksum(value: 0xAB)
        #expect(checksum.description == "00000000000000ab")
        #expect(StateChecksum("00000000000000ab") == checksum)
        #expect(StateChecksum("ab") == nil)
        #expect(StateChecksum("zz000000000000ab") == nil)
    }
}

@Suite struct TokenAndNameTests {
    @Test func serverTokensRoundTripAndRejectGarbage() {
        let token = ServerToken(epoch: "0123456789abcdef", version: 42)
        #expect(token.description == "0123456789abcdef.42")
        #expect(ServerToken("0123456789abcdef.42") == token)
        for garbage in ["", "x", "0123456789abcdef", "0123456789ABCDEF.1", "0123456789abcdef.-1", "0123456789abcdef.1.2", "0123456789abcdef.99999999999999999999999", "0123456789abcdef.007",
                        "0123456789abcdef.0"] {  // versions start at 1: no server issued .0
            #expect(ServerToken(garbage) == nil, "\(garbage)")
        }
    }

    @Test func collectionNames() {
        for good in ["countries", "a", "0-9_x", String(repeating: "a", count: 64)] { #expect(CollectionName.isValid(good)) }
        for bad in ["", "-a", "_a", "A", "a.b", "a/b", "é", String(repeating: "a", count: 65)] { #expect(!CollectionName.isValid(bad)) }
    }

    @Test func httpDatesFormatAndParse() {
        #expect(HTTPDate.format(784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        for seconds: Int64 in [0, 951_782_400, 1_700_000_000, 4_102_444_800] {
            #expect(HTTPDate.parse(HTTPDate.format(seconds)) == seconds)
        }
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == nil)
        #expect(HTTPDate.parse("garbage") == nil)
    }

    /// Found by the `httpdate` fuzzer: a year below 1000 formatted as three digits, which
    /// did not parse back; signs slipped through `Int(_:)`.
    @Test func httpDatesKeepFourDigitYearsAndRefuseSigns() {
        let early = HTTPDate.parse("Sun, 06 Nov 0997 08:49:37 GMT")
        #expect(early != nil)
        #expect(early.map(HTTPDate.format) == "Mon, 06 Nov 0997 08:49:37 GMT")  // the weekday is not checked
        for bad in ["Sun, +6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov +994 08:49:37 GMT", "Sun, 06 Nov 1994 08:+9:37 GMT", "Sun, 06 Nov -994 08:49:37 GMT"] {
            #expect(HTTPDate.parse(bad) == nil, "\(bad)")
        }
    }
}
