import DeltaSnapCore
import Foundation
import Testing

/// The fast paths of `utf8Precedes` (one `memcmp`) and `CanonicalJSON.writeString` (one copy
/// when nothing needs escaping) agree with the byte-by-byte definitions.
@Suite struct ByteOrderTests {
    static let samples: [String] = [
        "", "a", "b", "ab", "abc", "ab\u{0}", "A", "z", "é", "e\u{301}", "ü", "İzmir", "ß", "😀", "😀a", "a😀", "\u{7f}", "\u{80}", "\u{ffff}",
        "sets/8271", "sets/8272", "sets/82710", "members/alice", "quote\"d", "back\\slash", "tab\tnew\nline", "\u{1}", "ctrl\u{1f}",
    ]

    @Test func utf8PrecedesIsByteWiseOrder() {
        for a in Self.samples {
            for b in Self.samples {
                #expect(a.utf8Precedes(b) == a.utf8.lexicographicallyPrecedes(b.utf8), "\(a.debugDescription) < \(b.debugDescription)")
            }
            // A bridged or substring-made string takes the same path or the fallback alike.
            let copy = String(Substring(a))
            #expect(!a.utf8Precedes(copy) && !copy.utf8Precedes(a))
        }
    }

    @Test func writeStringEscapesExactlyWhatCanonicalFormEscapes() throws {
        for string in Self.samples {
            var out: [UInt8] = []
            CanonicalJSON.writeString(string, into: &out)
            let text = String(decoding: out, as: UTF8.self)
            // Valid JSON for the same string, and no escape beyond the canonical ones.
            #expect(try JSONSerialization.jsonObject(with: Data(out), options: .fragmentsAllowed) as? String == string, "\(text)")
            if !string.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) {
                #expect(out == [0x22] + Array(string.utf8) + [0x22])
            }
        }
        var tab: [UInt8] = []
        CanonicalJSON.writeString("a\tb\u{1}\"\\", into: &tab)
        #expect(String(decoding: tab, as: UTF8.self) == #""a\tb\u0001\"\\""#)
    }
}

/// `JSONReader.member(_:)`: one member's value, the others skipped unbuilt.
@Suite struct JSONMemberTests {
    @Test func oneMemberIsReadAndTheOthersSkipped() throws {
        let text = #"{"a":{"b":[1,"}",{"c":null}]},"id":"x\"y","set":"8271","z":-1.5e3}"#
        #expect(try JSONReader(bytes: Array(text.utf8)).member("set") == .string("8271"))
        #expect(try JSONReader(bytes: Array(text.utf8)).member("z") == JSONReader(bytes: Array("-1.5e3".utf8)).readValue())
        #expect(try JSONReader(bytes: Array(text.utf8)).member("a") == JSONReader(bytes: Array(#"{"b":[1,"}",{"c":null}]}"#.utf8)).readValue())
        #expect(try JSONReader(bytes: Array(text.utf8)).member("missing") == nil)
        #expect(try JSONReader(bytes: Array("{}".utf8)).member("set") == nil)
        #expect(try JSONReader(bytes: Array("[1]".utf8)).member("set") == nil)
        #expect(throws: JSONParseError.self) { try JSONReader(bytes: Array(#"{"a" 1}"#.utf8)).member("b") }
    }

    /// Keys are compared as their bytes with escapes decoded, whole: not a prefix, not a
    /// longer key, and an escaped key is the key it spells.
    @Test func keysAreComparedWholeWithTheirEscapesDecoded() throws {
        let text = #"{"se":1,"sets":2,"s\u0065t":"escaped","\u00e9t\u00e9":"summer","a\"b":3}"#
        #expect(try JSONReader(bytes: Array(text.utf8)).member("set") == .string("escaped"))
        #expect(try JSONReader(bytes: Array(text.utf8)).member("été") == .string("summer"))
        #expect(try JSONReader(bytes: Array(text.utf8)).member("a\"b") == JSONReader(bytes: Array("3".utf8)).readValue())
        #expect(try JSONReader(bytes: Array(text.utf8)).member("s") == nil)
        #expect(try JSONReader(bytes: Array(text.utf8)).member("setss") == nil)
        #expect(try JSONReader(bytes: Array(#"{"set\u0000":1}"#.utf8)).member("set") == nil)
        #expect(throws: JSONParseError.self) { try JSONReader(bytes: Array(#"{"se"#.utf8)).member("set") }
    }
}
