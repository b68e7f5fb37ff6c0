import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Revert from history (issue 21): an ordinary queued write of an old value — pushed,
/// merged, and itself recorded in history — through the client API and `deltasnap revert`.
@Suite struct RevertTests {
    @Test func aRevertIsAQueuedWriteOfTheOldValueAndGoesToHistoryInTurn() async throws {
        try await TwoWaySyncTests().withWorld { world in
            let phone = try world.replica("phone")
            await phone.sync()
            try await phone.patch(id: "n1", json: #"{"title":"second"}"#)
            await phone.sync()
            try await phone.patch(id: "n1", json: #"{"body":"y"}"#)
            await phone.sync()
            let before = try await phone.history(of: "n1")
            #expect(before.count == 2, "\(before)")
            let original = try #require(before.last)
            #expect(original.value == Self.object(#"{"body":"x","id":"n1","title":"a"}"#))

            let seq = try await phone.revert("n1", to: original.version)
            #expect(try await phone.pendingWrites().map(\.seq) == [seq])
            #expect(try await phone.record(id: "n1") == original.value)  // visible at once, offline
            await phone.sync()
            #expect(await phone.lastPushReport.accepted == 1)
            #expect(try world.export().contains(#"{"body":"x","id":"n1","title":"a"}"#))
            let after = try await phone.history(of: "n1")
            #expect(after.count == 3 && after.first?.value == Self.object(#"{"body":"y","id":"n1","title":"second"}"#), "\(after)")
            // Another device sees the reverted value like any other change.
            let laptop = try world.replica("laptop")
            await laptop.sync()
            #expect(try await laptop.record(id: "n1") == original.value)
        }
    }

    @Test func aVersionNotInTheHistoryIsRefusedAndNothingIsQueued() async throws {
        try await TwoWaySyncTests().withWorld { world in
            let phone = try world.replica("phone")
            await phone.sync()
            await #expect(throws: RecordHistoryError.noSuchVersion(id: "n1", version: 99, listed: [])) {
                try await phone.revert("n1", to: 99)
            }
            #expect(try await phone.pendingWrites().isEmpty)
        }
    }

    @Test func theCommandQueuesTheRevertAndSyncPushesIt() async throws {
        try await TwoWaySyncTests().withWorld { world in
            let replica = world.dir.file("cli.sqlite")
            let url = world.url.absoluteString
            func run(_ arguments: [String]) async throws -> CLI.Result { try await offPool { try CLI.runBlocking(arguments) } }
            let token = ["--token", TestServer.writeToken]
            #expect(try await run(["pull", "--url", url, "--replica", replica]).status == 0)
            #expect(try await run(["local", "patch", "--replica", replica, "n2", #"{"title":"B"}"#]).status == 0)
            #expect(try await run(["sync", "--url", url, "--replica", replica] + token).status == 0)
            let history = try await run(["history", "--url", url, "n2"]).stdout
            let version = try #require(history.firstMatch(of: /"version":(\d+)/).map { String($0.1) })

            let reverted = try await run(["revert", "--url", url, "--replica", replica, "n2", "--to", version] + token)
            #expect(reverted.status == 0 && reverted.stdout == "queued 2 put n2 (the value of version \(version))\n", "\(reverted.stdout)\(reverted.stderr)")
            #expect(try await run(["pending", "--replica", replica]).stdout == "2 put n2 {\"id\":\"n2\",\"title\":\"b\"}\n")
            let synced = try await run(["sync", "--url", url, "--replica", replica] + token)
            #expect(synced.stdout.hasPrefix("pushed 1\nrefused 0\n"), "\(synced.stdout)")
            #expect(try world.export().contains(#"{"id":"n2","title":"b"}"#))

            let missing = try await run(["revert", "--url", url, "--replica", replica, "n2", "--to", "12345"] + token)
            #expect(missing.status == 1 && missing.stderr.hasPrefix("deltasnap: record \"n2\" has no history entry for version 12345"), "\(missing.stderr)")
            let otherCollection = try await run(["revert", "--url", url + "x", "--replica", replica, "n2", "--to", version] + token)
            #expect(otherCollection.status == 1, "\(otherCollection.stderr)")
        }
    }

    static func object(_ json: String) -> JSONValue { try! JSONReader(bytes: Array(json.utf8)).readValue() }
}
