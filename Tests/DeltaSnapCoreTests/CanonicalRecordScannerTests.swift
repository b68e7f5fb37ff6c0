@testable import DeltaSnapCore
import DeltaSnapSynthetic
import Testing

/// The fast path must agree with the full parser on everything it accepts, and refuse
/// (returning nil) everything that is not exactly canonical or not valid.
@Suite struct CanonicalRecordScannerTests {
    func scan(_ text: String) -> Record? { scan(Array(text.utf8)) }
    func scan(_ bytes: [UInt8]) -> Record? { bytes.withUnsafeBytes(CanonicalRecordScanner.scan) }
    func slow(_ bytes: [UInt8]) throws -> Record { try Record(parsing: try JSONReader(bytes: bytes).readValue()) }

    @Test func acceptsCanonicalRecordsExactlyAsTheFullParserWritesThem() throws {
        let generator = SyntheticRecords(seed: 77)
        for index in 0..<2000 {
            let bytes = generator.json(index: index, revision: index % 3)
            let fast = try #require(scan(bytes), "record \(index)")
            #expect(fast == (try slow(bytes)))
        }
        let handWritten = [
            #"{"id":"AD"}"#, #"{"hidden":true,"id":"XK"}"#, #"{"a":[],"b":{},"id":"x","z":null}"#,
            #"{"id":"é🇦🇩","n":[-0,1.5e-3,10E+2,0.25],"s":"a\"b\\c\nd\u0001\u001f\t"}"#,
            #"{"id":"k","nested":{"A":1,"B":[{"a":true,"b":false}]}}"#,
        ]
        for text in handWritten {
            let fast = try #require(scan(text), "\(text)")
            #expect(fast == (try slow(Array(text.utf8))), "\(text)")
            #expect(fast.text == text)
        }
    }

    @Test(arguments: [
        #"{ "id":"a"}"#, #"{"id" :"a"}"#, #"{"z":1,"id":"a"}"#, #"{"id":"a","a":{"b":1,"a":2}}"#,
        #"{"id":"a","s":"\/"}"#, #"{"id":"a","s":"\u00e9"}"#, #"{"id":"a","s":"\u001F"}"#, #"{"id":"a","s":"\u000a"}"#,
        #"{"hidden":false,"id":"a"}"#, #"{"hidden":true,"id":"a","x":1}"#, #"{"id":"a\"b"}"#, #"{"id":"a","x":1.0 }"#,
    ])
    func refusesNonCanonicalInputThatTheFullParserCanonicalises(_ text: String) throws {
        #expect(scan(text) == nil)
        // The full path still reads it, and Record.parse gives the same result.
        #expect(try Record.parse(Array(text.utf8)) == slow(Array(text.utf8)))
    }

    @Test(arguments: [
        [UInt8](#"{"id":"a""#.utf8), Array(#"{"id":"a"}x"#.utf8), Array(#"{"id":"a","n":01}"#.utf8),
        Array(#"{"id":"a","n":1.}"#.utf8), Array(#"{"id":"a","a":1,"a":2}"#.utf8), Array(#"{"id":""}"#.utf8),
        Array(#"{"id":1}"#.utf8), Array(#"{"name":"x"}"#.utf8), Array(#"{"id":"a","t":tru}"#.utf8),
        Array(#"{"id":"a","x":[1,]}"#.utf8),
        [0x7B, 0x22, 0x69, 0x64, 0x22, 0x3A, 0x22, 0xC0, 0x80, 0x22, 0x7D],  // overlong NUL
        [0x7B, 0x22, 0x69, 0x64, 0x22, 0x3A, 0x22, 0xED, 0xA0, 0x80, 0x22, 0x7D],  // surrogate
        [0x7B, 0x22, 0x69, 0x64, 0x22, 0x3A, 0x22, 0xF5, 0x80, 0x80, 0x80, 0x22, 0x7D],  // > U+10FFFF
        [0x7B, 0x22, 0x69, 0x64, 0x22, 0x3A, 0x22, 0x61, 0x01, 0x22, 0x7D],  // raw control character
    ])
    func refusesInvalidInputAndTheFullParserRejectsIt(_ bytes: [UInt8]) {
        #expect(scan(bytes) == nil)
        #expect(throws: (any Error).self) { try Record.parse(bytes) }
    }

    @Test func readRawValueReturnsEachValueAsWrittenAndCountsLines() throws {
        let text = "{\"id\":\"a\",\"s\":\"}]\\\"\"}\n\n[1,\n2]  \"x\" 42\n{\"id\":\n\"b\"}"
        let reader = JSONReader(bytes: Array(text.utf8))
        #expect(String(decoding: try reader.readRawValue(), as: UTF8.self) == "{\"id\":\"a\",\"s\":\"}]\\\"\"}")
        #expect(String(decoding: try reader.readRawValue(), as: UTF8.self) == "[1,\n2]")
        #expect(reader.line == 4)
        #expect(String(decoding: try reader.readRawValue(), as: UTF8.self) == "\"x\"")
        #expect(String(decoding: try reader.readRawValue(), as: UTF8.self) == "42")
        #expect(String(decoding: try reader.readRawValue(), as: UTF8.self) == "{\"id\":\n\"b\"}")
        #expect(reader.line == 6)
        #expect(try reader.isAtEnd())
    }
}
