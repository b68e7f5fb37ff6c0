import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Downloads through a network that drops every connection after a few megabytes: the bytes
/// that arrived are kept in `partial/` and the download goes on with `Range` (+ `If-Range`),
/// so a large file arrives having crossed the network about once — never started again at
/// byte 0 — and is proven before it is visible.
extension AttachmentSyncTests {
    /// A file of `megabytes` MiB at `path`, of a pattern that differs per MiB.
    static func bigFile(_ path: String, megabytes: Int) throws {
        FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        for part in 0..<megabytes { try handle.write(contentsOf: Data(Self.photo(1 << 20, seed: UInt8(truncatingIfNeeded: part &* 7 &+ 3)))) }
        try handle.close()
    }

    /// The issue's case: the connection cut after every 8 MiB the server sends. An eager `sync`
    /// brings the file whole, having moved it about once. 32 MiB here (four cuts, light enough
    /// beside the rest of the suite); `DELTASNAP_CUT_DOWNLOAD_MB=64` runs the issue's 64 MiB,
    /// `DELTASNAP_CUT_EVERY_MB` changes where the cuts fall.
    @Test(.timeLimit(.minutes(5)))
    func anEagerDownloadCutEveryFewMegabytesResumesWithRangeAndMovesTheFileOnce() async throws {
        let environment = ProcessInfo.processInfo.environment
        let megabytes = environment["DELTASNAP_CUT_DOWNLOAD_MB"].flatMap(Int.init) ?? 32
        let cutEvery = (environment["DELTASNAP_CUT_EVERY_MB"].flatMap(Int.init) ?? 8) << 20
        try await withWorld { world in
            let size = megabytes << 20
            let file = world.dir.file("big.bin")
            try Self.bigFile(file, megabytes: megabytes)
            let phone = try world.replica("phone")
            let reference = try await phone.attach(URL(fileURLWithPath: file), type: "application/octet-stream")
            try await phone.put(id: "n1", json: #"{"file":\#(reference)}"#)
            await phone.sync(ignoringBackoff: true)
            #expect(try await phone.pendingWrites().isEmpty)

            let proxy = try CuttingProxy(upstreamPort: world.server.port, cutDownstreamEvery: cutEvery)
            defer { proxy.stop() }
            let reader = try DeltaSnapReplica(
                path: world.dir.file("reader.sqlite"), collection: "notes", url: URL(string: "http://127.0.0.1:\(proxy.port)/v1/collections/notes")!,
                retryPolicy: RetryPolicy(initialDelay: 0.01, maximumDelay: 0.05), timeout: .seconds(30), accessToken: TestServer.writeToken)
            // A cut may also fall on the pull: sync again until the file is here.
            for _ in 0..<5 where try await reader.attachmentStatuses().map(\.state) != ["cached"] { await reader.sync(ignoringBackoff: true) }
            let report = await reader.lastAttachmentReport
            #expect(try await reader.attachmentStatuses().map(\.state) == ["cached"], "\(report)")
            #expect(proxy.cutCount >= size / cutEvery - 1, "the proxy cut \(proxy.cutCount) times")
            #expect(proxy.rangeRequests >= 1, "no Range request reached the server")
            #expect(Double(proxy.bytesDownstream) <= 1.1 * Double(size), "\(proxy.bytesDownstream) bytes crossed for a \(size)-byte file")
            let local = try await reader.attachment(reference)
            #expect(try Data(contentsOf: local) == Data(contentsOf: URL(fileURLWithPath: file)))
        }
    }
}
