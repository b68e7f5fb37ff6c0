import DeltaSnapClient
import DeltaSnapTestSupport
import Foundation
import Testing

/// The replica verbs on a replica still read in place from its bundle (an app's first start):
/// each writes through the bundle or refuses with one line, never creating an empty replica.
@Suite struct ReadInPlaceCommandTests {
    /// `deltasnap local … --snapshot BUNDLE`: a replica still read from its bundle is written
    /// to as the app would — checked against the bundled records, then copied with the write.
    @Test func aLocalWriteThroughTheCLIOnAReplicaStillInItsBundle() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try await Fixtures.bakedReplica(in: dir, count: 20)
        let path = dir.file("app.sqlite")
        let bundle = dir.file("items.replica")
        let pulled = try await CLI.run(["pull", "--url", "http://127.0.0.1:9/v1/collections/items", "--replica", path, "--snapshot", bundle, "--timeout", "1"])
        #expect(pulled.status == 4 && !FileManager.default.fileExists(atPath: path))
        let patched = try await CLI.run(["local", "patch", "--replica", path, "--snapshot", bundle, "r0000003", #"{"note":"offline"}"#])
        #expect(patched.status == 0 && patched.stdout == "queued patch r0000003 (seq 1)\n", "\(patched.stdout)\(patched.stderr)")
        #expect(try Fixtures.dumpReplica(path).contains(#""note":"offline""#))
        #expect(try Fixtures.dumpReplica(path).split(separator: "\n").count == 20)
    }

    /// Every verb that opens a replica file, given one still read in place from its bundle
    /// but not the bundle: it refuses with one clear line (or, `pending`, answers from what
    /// it knows: nothing can be queued there) — and never creates an empty replica in its place.
    @Test func everyVerbRefusesAReplicaReadInPlaceWithoutItsBundle() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try await Fixtures.bakedReplica(in: dir, count: 20)
        let path = dir.file("app.sqlite")
        let bundle = dir.file("items.replica")
        let dead = "http://127.0.0.1:9/v1/collections/items"
        let pulled = try await CLI.run(["pull", "--url", dead, "--replica", path, "--snapshot", bundle, "--timeout", "1"])
        #expect(pulled.status == 4 && !FileManager.default.fileExists(atPath: path))
        #expect(BundledReplica.isReadInPlace(path))

        let refusals: [[String]] = [
            ["local", "patch", "--replica", path, "r0000003", #"{"note":"offline"}"#],
            ["local", "put", "--replica", path, "new", #"{"v":1}"#],
            ["local", "delete", "--replica", path, "r0000003"],
            ["dump", "--replica", path],
            ["inspect", path],
            ["pull", "--url", dead, "--replica", path, "--timeout", "1"],
            ["sync", "--url", dead, "--replica", path, "--timeout", "1"],
            ["revert", "--url", dead, "--replica", path, "--to", "1", "r0000003"],
        ]
        for arguments in refusals {
            let result = try await CLI.run(arguments)
            let verb = arguments.prefix(2).joined(separator: " ")
            #expect(result.status == 1, "\(verb): \(result.status) \(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("read in place"), "\(verb): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(verb): \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: path), "\(verb) created a replica in the bundle's place")
        }
        // Nothing can be queued in a replica read in place (a write copies it first).
        let pending = try await CLI.run(["pending", "--replica", path, "--all"])
        #expect(pending.status == 0 && pending.stdout.isEmpty, "\(pending.stdout)\(pending.stderr)")
        #expect(!FileManager.default.fileExists(atPath: path))

        // With the bundle, the same write goes through and copies it.
        let patched = try await CLI.run(["local", "patch", "--replica", path, "--snapshot", bundle, "r0000003", #"{"note":"offline"}"#])
        #expect(patched.status == 0, "\(patched.stderr)")
        let listed = try await CLI.run(["pending", "--replica", path])
        #expect(listed.status == 0 && listed.stdout == #"1 patch r0000003 {"note":"offline"}"# + "\n", "\(listed.stdout)\(listed.stderr)")
    }
}
