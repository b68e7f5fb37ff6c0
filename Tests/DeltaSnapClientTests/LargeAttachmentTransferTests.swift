import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Files of tens of MiB through a network that drops every connection after a few megabytes.
/// A download keeps the bytes that arrived in `partial/` and goes on with `Range` (+ `If-Range`);
/// an upload resumes at the offset the server confirms. Either way the file crosses the network
/// about once — never started again at byte 0 — and is proven before it is visible.
///
/// One at a time, with their files written off the cooperative pool: two of them side by side
/// (64 MiB to build, hash and copy) held both of its threads for seconds on this 2-core machine
/// and stalled every in-process test server of the run.
extension AttachmentSyncTests {
    @Suite(.serialized) struct LargeFiles {
        /// A file of `megabytes` MiB at `path`, of a pattern that differs per MiB, written on a
        /// thread of its own.
        static func bigFile(_ path: String, megabytes: Int, seed: @escaping @Sendable (Int) -> UInt8) async throws {
            try await offPool {
                FileManager.default.createFile(atPath: path, contents: nil)
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
                for part in 0..<megabytes { try handle.write(contentsOf: Data(noiseBytes(1 << 20, seed: UInt64(seed(part)) << 32 | UInt64(part)))) }
                try handle.close()
            }
        }

        func withWorld(_ body: (World) async throws -> Void) async throws { try await AttachmentSyncTests().withWorld(body) }

        /// The file's size and the distance between cuts, in bytes: 32 MiB cut every 8 MiB
        /// unless the environment names others (`sizeVariable`, `DELTASNAP_CUT_EVERY_MB`).
        static func cutSizes(_ sizeVariable: String) -> (size: Int, cutEvery: Int) {
            let environment = ProcessInfo.processInfo.environment
            let megabytes = environment[sizeVariable].flatMap(Int.init) ?? 32
            return (megabytes << 20, (environment["DELTASNAP_CUT_EVERY_MB"].flatMap(Int.init) ?? 8) << 20)
        }

        /// A replica of `notes` named `name` that reaches the world's server through `proxy`,
        /// retrying at once and with the admin token.
        static func replica(_ name: String, of world: World, through proxy: CuttingProxy) throws -> DeltaSnapReplica {
            try DeltaSnapReplica(
                path: world.dir.file("\(name).sqlite"), collection: "notes", url: URL(string: "http://127.0.0.1:\(proxy.port)/v1/collections/notes")!,
                retryPolicy: RetryPolicy(initialDelay: 0.01, maximumDelay: 0.05), timeout: .seconds(30), accessToken: TestServer.writeToken)
        }

        /// The issue's case: the connection cut after every 8 MiB the server sends. An eager `sync`
        /// brings the file whole, having moved it about once. 32 MiB here (four cuts, light enough
        /// beside the rest of the suite); `DELTASNAP_CUT_DOWNLOAD_MB=64` runs the issue's 64 MiB,
        /// `DELTASNAP_CUT_EVERY_MB` changes where the cuts fall.
        @Test(.timeLimit(.minutes(5)))
        func anEagerDownloadCutEveryFewMegabytesResumesWithRangeAndMovesTheFileOnce() async throws {
            let (size, cutEvery) = Self.cutSizes("DELTASNAP_CUT_DOWNLOAD_MB")
            try await withWorld { world in
                let file = world.dir.file("big.bin")
                try await Self.bigFile(file, megabytes: size >> 20) { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
                let phone = try world.replica("phone")
                let reference = try await phone.attach(URL(fileURLWithPath: file), type: "application/octet-stream")
                try await phone.put(id: "n1", json: #"{"file":\#(reference)}"#)
                await phone.sync(ignoringBackoff: true)
                #expect(try await phone.pendingWrites().isEmpty)

                let proxy = try CuttingProxy(upstreamPort: world.server.port, cutDownstreamEvery: cutEvery)
                defer { proxy.stop() }
                let reader = try Self.replica("reader", of: world, through: proxy)
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

        /// The issue's 1 GiB through a proxy that cuts every 64 MiB, in a bounded form for CI (4
        /// cuts rather than 16; `DELTASNAP_CUT_UPLOAD_MB=1024 DELTASNAP_CUT_EVERY_MB=64`
        /// runs the full one): the upload completes in one sync, and what crossed the proxy is at
        /// most 1.1 times the file.
        @Test(.timeLimit(.minutes(5))) func anUploadThroughAProxyThatCutsEveryFewMegabytesCompletes() async throws {
            // Each cut loses what was in flight (socket buffers, whatever the file: a few hundred
            // KiB, over 500 KiB on a loaded machine where the server reads slower), so the bounded
            // form keeps cuts as far apart, relative to that, as the full one's: 32 MiB cut every
            // 8 MiB allows 800 KiB a cut (the full one 6.4 MiB).
            let (size, cutEvery) = Self.cutSizes("DELTASNAP_CUT_UPLOAD_MB")
            try await withWorld { world in
                let file = world.dir.file("big.bin")
                try await Self.bigFile(file, megabytes: size >> 20) { UInt8(truncatingIfNeeded: $0) }
                let proxy = try CuttingProxy(upstreamPort: world.server.port, cutEvery: cutEvery)
                defer { proxy.stop() }
                let phone = try Self.replica("phone", of: world, through: proxy)
                await phone.setAttachmentPolicy(.none)
                let reference = try await phone.attach(URL(fileURLWithPath: file), type: "application/octet-stream")
                try await phone.put(id: "n1", json: #"{"file":\#(reference)}"#)
                // A cut may also fall on the push or the pull: sync again until the write landed.
                for _ in 0..<10 where try await !phone.pendingWrites().isEmpty { await phone.sync(ignoringBackoff: true) }
                let (files, pushed) = (await phone.lastAttachmentReport, await phone.lastPushReport)
                #expect(try await phone.pendingWrites().isEmpty, "\(files) \(pushed)")
                #expect(proxy.cutCount >= size / cutEvery - 1, "the proxy cut \(proxy.cutCount) times")
                #expect(Double(proxy.bytesUpstream) <= 1.1 * Double(size), "\(proxy.bytesUpstream) bytes crossed for a \(size)-byte file")
                let held = try SQLiteCollectionStore(path: world.dir.file("s.sqlite"), readOnly: true)
                #expect(try await held.attachmentSize(reference.sha256) == UInt64(size))
                #expect(try Fixtures.export(world.store, "notes").contains(reference.sha256))
            }
        }
    }
}
