import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// What docs/CLIENT.md and `--help` say of files on the command line: the media type
/// `--attach` picks, which commands print the `attachments:` line, what an eager sync does
/// for records the replica already holds, what the figures count after a refused download,
/// and that such a sync exits 4 (the records are there; the next sync fetches the file).
extension AttachmentCommandTests {
    @Test(.timeLimit(.minutes(2)))
    func theAttachmentsLineMediaTypesAndExitStatusAreAsDocumented() async throws {
        let (dir, _, server) = try await Self.notesServer()
        defer {
            server.stop()
            dir.remove()
        }
        let url = "\(server.collectionsURL)/notes"
        func run(_ arguments: [String]) async throws -> CLI.Result { try await offPool { try CLI.runBlocking(arguments) } }
        let photo = dir.file("Beach.JPG")
        let photoBytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 17 &+ $0 >> 6) }
        FileManager.default.createFile(atPath: photo, contents: Data(photoBytes))
        let data = dir.file("blob.data")
        FileManager.default.createFile(atPath: data, contents: Data((0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 3) }))

        // The media type comes from the extension, whatever its case; unknown: octet-stream.
        let phone = dir.file("phone.sqlite")
        #expect(try await run(["pull", "--url", url, "--replica", phone]).status == 0)
        let put = try await run(["local", "put", "--replica", phone, "--attach", "photo=\(photo)", "--attach", "raw=\(data)", "n1", #"{"title":"x"}"#])
        #expect(put.status == 0, "\(put.stderr)")
        let attached = put.stdout.split(separator: "\n").filter { $0.hasPrefix("attached ") }.map { $0.split(separator: " ") }
        #expect(attached.map { "\($0[1]) \($0[3]) \($0[4])" } == ["photo: 100000 image/jpeg", "raw: 5000 application/octet-stream"], "\(put.stdout)")
        let photoHash = try #require(attached.first.map { String($0[2]) })
        let synced = try await run(["sync", "--url", url, "--replica", phone, "--token", "cli-token"])
        #expect(synced.status == 0 && synced.stdout.hasSuffix("attachments: uploaded 2 (105000 bytes), downloaded 0 (0 bytes)\n"), "\(synced.stdout)")

        // pull prints its pull line only.
        let laptop = dir.file("laptop.sqlite")
        let pulled = try await run(["pull", "--url", url, "--replica", laptop, "--attachments", "lazy"])
        #expect(pulled.status == 0 && !pulled.stdout.contains("attachments:") && pulled.stdout.split(separator: "\n").count == 1, "\(pulled.stdout)")
        // The first eager sync goes over the records the replica already holds.
        let eager = try await run(["sync", "--url", url, "--replica", laptop])
        #expect(eager.status == 0 && eager.stdout.hasSuffix("attachments: uploaded 0 (0 bytes), downloaded 2 (105000 bytes)\n"), "\(eager.stdout)")

        // A download that does not prove: its bytes count, the file does not, exit 4.
        let tablet = dir.file("tablet.sqlite")
        #expect(try await run(["pull", "--url", url, "--replica", tablet, "--attachments", "none"]).status == 0)
        let partial = dir.file("tablet.sqlite.attachments/partial/\(photoHash)")
        try FileManager.default.createDirectory(atPath: (partial as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: partial, contents: Data(count: 99_999))  // resumed for its last byte, then refused
        let refused = try await run(["sync", "--url", url, "--replica", tablet])
        #expect(refused.status == 4, "\(refused.stdout)\(refused.stderr)")
        #expect(refused.stdout.contains("attachments: uploaded 0 (0 bytes), downloaded 1 (5001 bytes), 1 failed ("), "\(refused.stdout)")
        let again = try await run(["sync", "--url", url, "--replica", tablet])
        #expect(again.status == 0 && again.stdout.hasSuffix("attachments: uploaded 0 (0 bytes), downloaded 1 (100000 bytes)\n"), "\(again.stdout)")
    }
}
