import DeltaSnapCore
import Testing

/// The conflict copy's id and value, and the push format's `base` and `copied` members.
@Suite struct ConflictCopyRuleTests {
    @Test func theCopysIdDerivesFromTheOriginalAndTheWriteAlone() {
        let id = ConflictCopy.id(of: "n1", client: "laptop", seq: 7)
        #expect(id == ConflictCopy.id(of: "n1", client: "laptop", seq: 7))
        #expect(id != ConflictCopy.id(of: "n1", client: "laptop", seq: 8) && id != ConflictCopy.id(of: "n1", client: "phone", seq: 7))
        #expect(id.hasPrefix("n1~conflict-") && id.utf8.count == "n1~conflict-".utf8.count + 16)
    }

    @Test func aCopyIsTheWritesResultOverTheServersValuePointingAtTheOriginal() throws {
        let current = try Record(json: Array(#"{"body":"b","id":"n1","title":"server"}"#.utf8))
        let patch = Mutation(seq: 1, operation: .patch, id: "n1", value: .object([JSONMember("title", .string("mine"))]))
        #expect(try ConflictCopy.record(of: patch, over: current, copyID: "c")?.text == #"{"body":"b","conflictOf":"n1","id":"c","title":"mine"}"#)
        let put = Mutation(seq: 2, operation: .put, id: "n1", value: .object([JSONMember("title", .string("all mine"))]))
        #expect(try ConflictCopy.record(of: put, over: current, copyID: "c")?.text == #"{"conflictOf":"n1","id":"c","title":"all mine"}"#)
    }

    @Test func theBaseAndACopiedResultTravelOnTheWire() throws {
        let write = Mutation(seq: 3, operation: .patch, id: "n1", value: .object([JSONMember("a", .number("1"))]), base: "0123456789abcdef.4")
        #expect(write.json == #"{"base":"0123456789abcdef.4","id":"n1","op":"patch","seq":3,"value":{"a":1}}"#)
        let parsed = try PushRequest.parse(PushRequest(client: "c1", mutations: [write]).bytes)
        #expect(parsed.mutations.first?.mutation == write)
        let response = PushResponse(
            collection: "notes", client: "c1", lastSeq: 3, committed: true, token: "0123456789abcdef.5",
            results: [MutationResult(seq: 3, status: .copied(version: 5, copy: "n1~conflict-00000000000000ab"))])
        #expect(String(decoding: response.bytes, as: UTF8.self).contains(#"{"copy":"n1~conflict-00000000000000ab","seq":3,"status":"copied","version":5}"#))
        #expect(PushResponse.parse(response.bytes) == response)
    }
}
