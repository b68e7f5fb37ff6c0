import Crypto
import DeltaSnapCore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import Foundation
import Testing

/// A preview device (docs/PROTOCOL.md §13.5) sees the files its view — the workspace — refers
/// to: the photo a change under review adds shows on the reviewer's tablet, not a broken image,
/// while no one else reads it before the approval.
extension ReviewTests {
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func aPreviewDeviceDownloadsAFileOnlyTheWorkspaceRefersTo(_ backend: TestBackend) async throws {
        try await withServer(backend) { fixture in
            let editor = try await fixture.token("ed", roles: ["editor"])
            let bytes = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ $0 >> 8) }
            let hash = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
            let uploaded = try await offPool {
                try fixture.server.connect().request(
                    "PUT", "/v1/collections/catalogue/attachments/\(hash)", headers: ["Authorization": "Bearer \(editor)", "Content-Type": "image/jpeg"], body: bytes)
            }
            #expect(uploaded.status == 201, "\(uploaded.text)")
            let reference = uploaded.text.trimmingCharacters(in: .newlines)
            let push = #"{"client":"ed-laptop","mutations":[{"seq":1,"op":"patch","id":"\#(SyntheticRecords.id(1))","value":{"photo":\#(reference)}}]}"#
            let pushed = try await fixture.send("POST", "/v1/collections/catalogue/mutations", token: editor, body: push)
            #expect(pushed.status == 200 && pushed.text.contains("applied"), "\(pushed.text)")

            let path = "/v1/collections/catalogue/attachments/\(hash)"
            let device = try await fixture.token("tablet", preview: true)
            let previewed = try await fixture.send("GET", path, token: device)
            #expect(previewed.status == 200 && previewed.body == bytes, "\(previewed.status) \(previewed.text.prefix(200))")
            #expect(previewed.header("Cache-Control") == "private, no-store" && previewed.header("Content-Type") == "image/jpeg")
            let ranged = try await fixture.send("GET", path, token: device, headers: ["Range": "bytes=100-199"])
            #expect(ranged.status == 206 && ranged.body == Array(bytes[100..<200]))
            // Nobody else reads it before the approval: not a reader, not the editor's own token.
            for token in [nil, editor, try await fixture.token("someone")] {
                #expect(try await fixture.send("GET", path, token: token).status == 404)
            }
        }
    }
}
