import DeltaSnapCore
import Testing

@Suite struct CanonicalJSONTests {
    func canonical(_ text: String) throws -> String {
        CanonicalJSON.string(try JSONReader(bytes: Array(text.utf8)).readValue())
    }

    @Test func sortsKeysByUTF8BytesAndDropsWhitespace() throws {
        #expect(try canonical(#" { "b" : 1 , "a" : [ true , null , false ] , "é": {}, "Z": [] } "#)
            == #"{"Z":[],"a":[true,null,false],"b":1,"é":{}}"#)
    }

    @Test func keepsNumberLiteralsAsWritten() throws {
        #expect(try canonical(#"[1.0, -0, 12345678901234567890123, 1e5, 2E-3, 0.5]"#)
            == #"[1.0,-0,12345678901234567890123,1e5,2E-3,0.5]"#)
    }

    @Test func decodesEscapesAndReEscapesOnlyWhatMustBe() throws {
        #expect(try canonical(#"["\u00e9\/\"\\\n\t\u0001\ud83c\udde6", "🇦🇩"]"#)
            == "[\"é/\\\"\\\\\\n\\t\\u0001🇦\", \"🇦🇩\"]".replacingOccurrences(of: ", ", with: ","))
    }

    @Test(arguments: [
        #"{"a":1,"a":2}"#, #"{"a" 1}"#, #"[1,]"#, #"01"#, #"1."#, #"-"#, #"tru"#, #""abc"#,
        "\"a\u{01}b\"", #""\ud800""#, #""\x""#, #"{"a":1"#, #"nul"#, #"[1 2]"#,
    ])
    func rejectsInvalidJSON(_ text: String) {
        #expect(throws: JSONParseError.self) {
            let reader = JSONReader(bytes: Array(text.utf8))
            _ = try reader.readValue()
            if try !reader.isAtEnd() { throw reader.error("trailing") }
        }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONReader(bytes: [0x22, 0xFF, 0x22]).readValue() }
    }

    @Test func rejectsNestingDeeperThanTheLimit() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: JSONParseError.self) { try JSONReader(bytes: Array(deep.utf8)).readValue() }
    }

    @Test func reportsTheLineOfAnError() {
        let reader = JSONReader(bytes: Array("{\"id\":1}\n\n{\"id\": tru}".utf8))
        #expect(throws: JSONParseError.self) {
            _ = try reader.readValue()
            _ = try reader.readValue()
        }
        #expect(reader.line == 3)
    }

    @Test func readsTheSameValuesFromOneByteChunks() throws {
        let text = #"{"id":"AD","name":"Andorra \u00e9","n":[1.5e3,{"x":null}]} {"id":"é"}"#
        let bytes = Array(text.utf8)
        var index = 0
        let chunked = JSONReader(nextChunk: {
            guard index < bytes.count else { return nil }
            defer { index += 1 }
            return [bytes[index]]
        })
        let whole = JSONReader(bytes: bytes)
        #expect(try chunked.readValue() == whole.readValue())
        #expect(try chunked.readValue() == whole.readValue())
        #expect(try chunked.isAtEnd())
    }
}

@Suite struct RecordTests {
    @Test func canonicalBytesAreIndependentOfKeyOrderAndSpacing() throws {
        let a = try Record(json: Array(#"{"id":"AD","name":"Andorra","n":1}"#.utf8))
        let b = try Record(json: Array(#" { "n" : 1, "name":"Andorra" ,"id" : "AD" } "#.utf8))
        #expect(a == b)
        #expect(a.text == #"{"id":"AD","n":1,"name":"Andorra"}"#)
    }

    @Test func hiddenTrueMakesATombstone() throws {
        let record = try Record(json: Array(#"{"id":"XK","hidden":true,"name":"ignored"}"#.utf8))
        #expect(record.isHidden)
        #expect(record.text == #"{"hidden":true,"id":"XK"}"#)
    }

    @Test func hiddenFalseIsDroppedFromTheBytes() throws {
        let record = try Record(json: Array(#"{"id":"XK","hidden":false,"name":"Kosovo"}"#.utf8))
        #expect(!record.isHidden)
        #expect(record.text == #"{"id":"XK","name":"Kosovo"}"#)
    }

    @Test(arguments: [
        (#"[1]"#, RecordError.notAnObject),
        (#"{"name":"x"}"#, .missingID),
        (#"{"id":7}"#, .idNotAString),
        (#"{"id":""}"#, .emptyID),
        (#"{"id":"A","hidden":"yes"}"#, .hiddenNotABoolean(id: "A")),
    ])
    func rejectsInvalidRecords(_ text: String, _ expected: RecordError) {
        #expect(throws: expected) { try Record(parsing: try JSONReader(bytes: Array(text.utf8)).readValue()) }
    }
}
