import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// `deltasnap attachment get` through a network that drops every connection after a few
/// megabytes: the command keeps what arrived and goes on with `Range`, so the file crosses
/// the network about once and is written to `--out` only once proven.
extension AttachmentCommandTests {
    @Test(.timeLimit(.minutes(4)))
    func attachmentGetCutEveryFewMegabytesResumesWithRange() async throws {
        let megabytes = ProcessInfo.processInfo.environment["DELTASNAP_CUT_DOWNLOAD_MB"].flatMap(Int.init) ?? 24
        let cutEvery = 8 << 20
        let (dir, _, server) = try await Self.notesServer()
        defer {
            server.stop()
            dir.remove()
        }
        func run(_ arguments: [String]) async throws -> CLI.Result { try await offPool { try CLI.runBlocking(arguments) } }
        let file = dir.file("big.bin")
        FileManager.default.createFile(atPath: file, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        for part in 0..<megabytes { try handle.write(contentsOf: Data(noiseBytes(1 << 20, seed: UInt64(part)))) }
        try handle.close()
        let url = "\(server.collectionsURL)/notes"
        let phone = dir.file("phone.sqlite")
        #expect(try await run(["pull", "--url", url, "--replica", phone]).status == 0)
        let put = try await run(["local", "put", "--replica", phone, "--attach", "file=\(file)", "n1", #"{"title":"big"}"#])
        let hash = try #require(put.stdout.split(separator: " ").dropFirst(2).first.map(String.init), "\(put.stdout)\(put.stderr)")
        let synced = try await run(["sync", "--url", url, "--replica", phone, "--token", "cli-token"])
        #expect(synced.status == 0, "\(synced.stderr)")
        let laptop = dir.file("laptop.sqlite")
        #expect(try await run(["sync", "--url", url, "--replica", laptop, "--attachments", "lazy"]).status == 0)

        let proxy = try CuttingProxy(upstreamPort: server.port, cutDownstreamEvery: cutEvery)
        defer { proxy.stop() }
        let out = dir.file("copy.bin")
        let got = try await run(["attachment", "get", "--url", "http://127.0.0.1:\(proxy.port)/v1/collections/notes", "--replica", laptop, hash, "--out", out])
        #expect(got.status == 0, "\(got.stderr)")
        #expect(FileManager.default.contents(atPath: out) == FileManager.default.contents(atPath: file))
        #expect(proxy.cutCount >= megabytes * (1 << 20) / cutEvery - 1 && proxy.rangeRequests >= 1, "cuts \(proxy.cutCount), Range requests \(proxy.rangeRequests)")
        #expect(Double(proxy.bytesDownstream) <= 1.1 * Double(megabytes << 20), "\(proxy.bytesDownstream) bytes crossed for a \(megabytes) MiB file")
    }
}
