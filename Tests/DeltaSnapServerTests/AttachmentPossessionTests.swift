import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Proof of possession (docs/PROTOCOL.md §12.2): naming a blob's hash in a push is not enough
/// to refer to it — the writer uploaded those bytes into the scope it writes, or may read a
/// record that names them — while the store still keeps one copy of the bytes.
extension AttachmentEndpointTests {
    func push(_ fixture: Fixture, _ base: String, as subject: String, seq: Int, id: String, value: String) async throws -> MutationResult.Status {
        let body = #"{"client":"phone","mutations":[{"seq":\#(seq),"op":"put","id":"\#(id)","value":\#(value)}]}"#
        let pushed = try await fixture.request("POST", "\(base)/mutations", as: subject, headers: ["Content-Type": "application/json"], body: Array(body.utf8))
        let answer = try #require(PushResponse.parse(pushed.body), "\(pushed.text)")
        return try #require(answer.results.first).status
    }

    static func refusal(_ status: MutationResult.Status) -> MutationRefusal? {
        if case .refused(let refusal) = status { return refusal }
        return nil
    }

    /// The deduplication attack: Bob learns the hash of Alice's private file and names it in a
    /// record of his own partition. Refused exactly as a hash no one stored (so the refusal
    /// does not confirm the file exists), and the bytes stay Alice's. Once Bob uploads the
    /// same bytes (the whole transfer, checked), he may name them; the store keeps one copy.
    @Test(arguments: TestBackend.allCases) func aHashAnotherUserStoredPrivatelyIsRefusedAsOneNoOneStored(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(20_000, seed: 7)
            let hash = Self.sha256(bytes)
            let alice = "/v1/collections/attempts/partitions/alice"
            let bob = "/v1/collections/attempts/partitions/bob"
            let reference = try await fixture.upload(bytes, to: alice, as: "alice")
            let own = try await push(fixture, alice, as: "alice", seq: 1, id: "a1", value: #"{"photo":\#(reference)}"#)
            guard case .applied = own else { Issue.record("Alice's own file: \(own)"); return }

            let stolen = try #require(Self.refusal(try await push(fixture, bob, as: "bob", seq: 1, id: "b1", value: #"{"photo":\#(reference)}"#)))
            let nobody = String(repeating: "e", count: 64)
            let unknown = try #require(Self.refusal(try await push(
                fixture, bob, as: "bob", seq: 2, id: "b1", value: #"{"photo":\#(reference.replacingOccurrences(of: hash, with: nobody))}"#)))
            #expect(stolen.code == "missing_attachment" && stolen.code == unknown.code)
            #expect(stolen.message.replacingOccurrences(of: hash, with: nobody) == unknown.message, "the refusal tells the two apart")
            #expect(!(try await fixture.store.export("attempts/bob")).contains(hash), "the stolen reference was committed")
            let download = try await fixture.request("GET", "\(bob)/attachments/\(hash)", as: "bob")
            #expect(download.status == 404 && download.body != bytes)

            // Bob holds the bytes: his upload into his own partition (every byte checked) proves it.
            _ = try await fixture.upload(bytes, to: bob, as: "bob")
            let proven = try await push(fixture, bob, as: "bob", seq: 3, id: "b1", value: #"{"photo":\#(reference)}"#)
            guard case .applied = proven else { Issue.record("Bob's upload did not prove the bytes: \(proven)"); return }
            let now = try await fixture.request("GET", "\(bob)/attachments/\(hash)", as: "bob")
            #expect(now.status == 200 && now.body == bytes)
            // One copy for both: the store names it once.
            #expect(try await fixture.store.store.collections(referringTo: hash, limit: 10).sorted() == ["attempts/alice", "attempts/bob"])
            if backend == .sqlite {
                let held = try FileManager.default.subpathsOfDirectory(atPath: fixture.store.url + ".attachments").filter { $0.hasSuffix(hash) }
                #expect(held.count <= 1, "\(held)")
            }
        }
    }

    /// A writer who may read a record that names a file holds it already: it names it in its
    /// own scope without uploading it again. A patch of a record that names a file keeps it.
    @Test(arguments: TestBackend.allCases) func aFileARecordTheWriterMayReadNamesNeedsNoUpload(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let bytes = Self.blob(3_000, seed: 21)
            let hash = Self.sha256(bytes)
            // The data owner publishes it in the public collection.
            let reference = try await fixture.upload(bytes, to: "/v1/collections/notes")
            let put = try await fixture.request("PUT", "/v1/collections/notes/records/n1", body: Array(#"{"photo":\#(reference)}"#.utf8))
            #expect(put.status == 200, "\(put.text)")

            let alice = "/v1/collections/attempts/partitions/alice"
            let named = try await push(fixture, alice, as: "alice", seq: 1, id: "a1", value: #"{"photo":\#(reference),"score":1}"#)
            guard case .applied = named else { Issue.record("a file Alice may read: \(named)"); return }
            let download = try await fixture.request("GET", "\(alice)/attachments/\(hash)", as: "alice")
            #expect(download.status == 200 && download.body == bytes)

            let patch = #"{"client":"phone","mutations":[{"seq":2,"op":"patch","id":"a1","value":{"score":2}}]}"#
            let patched = try await fixture.request("POST", "\(alice)/mutations", as: "alice", headers: ["Content-Type": "application/json"], body: Array(patch.utf8))
            #expect(patched.status == 200 && patched.text.contains("applied"), "\(patched.text)")
        }
    }
}
