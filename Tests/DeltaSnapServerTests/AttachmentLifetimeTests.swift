import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// What docs/PROTOCOL.md §12.3 says of cases a client could only guess before: ranges of an
/// empty file and `bytes=-0`, and a file's readability between its record's deletion and
/// garbage collection.
extension AttachmentEndpointTests {
    @Test(arguments: TestBackend.allCases) func anEmptyFileHasNoSatisfiableRangeAndASuffixLongerThanAFileGetsItWhole(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let empty = try await fixture.upload([], to: "/v1/collections/notes", type: "text/plain")
            let hundred = Self.blob(100, seed: 3)
            let some = try await fixture.upload(hundred, to: "/v1/collections/notes")
            let put = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"empty":\#(empty),"some":\#(some)}"#.utf8))
            #expect(put.status == 200, "\(put.text)")
            let emptyPath = "/v1/collections/notes/attachments/\(Self.sha256([]))"
            let somePath = "/v1/collections/notes/attachments/\(Self.sha256(hundred))"

            let whole = try await fixture.request("GET", emptyPath, as: nil)
            #expect(whole.status == 200 && whole.body.isEmpty && whole.header("Content-Length") == "0")
            for range in ["bytes=-0", "bytes=-5", "bytes=0-", "bytes=0-0"] {
                let answer = try await fixture.request("GET", emptyPath, as: nil, headers: ["Range": range])
                #expect(answer.status == 416 && answer.header("Content-Range") == "bytes */0", "\(range): \(answer.status)")
            }
            let zeroSuffix = try await fixture.request("GET", somePath, as: nil, headers: ["Range": "bytes=-0"])
            #expect(zeroSuffix.status == 416 && zeroSuffix.header("Content-Range") == "bytes */100")
            let longSuffix = try await fixture.request("GET", somePath, as: nil, headers: ["Range": "bytes=-500"])
            #expect(longSuffix.status == 206 && longSuffix.header("Content-Range") == "bytes 0-99/100" && longSuffix.body == hundred)
        }
    }

    /// A deleted record's file stays readable where it was referred to — a revert may bring the
    /// value back — until garbage collection removes the blob; then it is the `404` of a file
    /// that never was.
    @Test(arguments: TestBackend.allCases) func aDeletedRecordsFileIsReadableUntilGarbageCollection(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let alice = "/v1/collections/attempts/partitions/alice"
            // Larger than what the server keeps in memory: the test asks the store, not a cache.
            let bytes = Self.blob(300_000, seed: 9)
            let hash = Self.sha256(bytes)
            let reference = try await fixture.upload(bytes, to: alice, as: "alice")
            let push = #"{"client":"phone","mutations":[{"seq":1,"op":"put","id":"a1","value":{"photo":\#(reference)}}]}"#
            let pushed = try await fixture.request("POST", "\(alice)/mutations", as: "alice", headers: ["Content-Type": "application/json"], body: Array(push.utf8))
            #expect(pushed.status == 200 && pushed.text.contains("applied"), "\(pushed.text)")
            // Deleted by the data owner's write API, which keeps no history: no value is left
            // that a revert could bring back (a pushed delete's history would keep the file).
            let deleted = try await fixture.request("DELETE", "\(alice)/records/a1")
            #expect(deleted.status == 200, "\(deleted.text)")
            #expect(!(try await fixture.store.export("attempts/alice")).contains(hash), "the record is not deleted")

            let meanwhile = try await fixture.request("GET", "\(alice)/attachments/\(hash)", as: "alice")
            #expect(meanwhile.status == 200 && meanwhile.body == bytes, "gone before garbage collection")

            // A day later it has been unreferenced long enough (grace: one hour here).
            let now = Int64(Date().timeIntervalSince1970)
            _ = try await fixture.store.store.collectAttachmentGarbage(unreferencedFor: 3_600, now: now + 86_400)
            let collected = try await fixture.store.store.collectAttachmentGarbage(unreferencedFor: 3_600, now: now + 2 * 86_400)
            #expect(collected.removed == 1, "\(collected)")
            let after = try await fixture.request("GET", "\(alice)/attachments/\(hash)", as: "alice")
            let never = try await fixture.request("GET", "\(alice)/attachments/\(String(repeating: "f", count: 64))", as: "alice")
            #expect(after.status == 404 && Self.error(after) == Self.error(never))
        }
    }
}
