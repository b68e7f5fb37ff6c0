import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Conflict copies end to end (issue 21): two devices edit one note offline in a collection
/// served with `--merge-fork`; the second push lands as a copy, and both devices show both.
@Suite struct ConflictCopyClientTests {
    @Test func theSecondEditOfAChangedRecordBecomesACopyThatEveryDeviceShows() async throws {
        try await TwoWaySyncTests().withWorld(forkCollections: ["notes"]) { world in
            let phone = try world.replica("phone")
            let laptop = try world.replica("laptop")
            // Both devices hold n1 first (a first sync can time out on a loaded machine).
            try await TwoWaySyncTests().settle(phone, world)
            try await TwoWaySyncTests().settle(laptop, world)
            try await phone.patch(id: "n1", json: #"{"title":"from the phone"}"#)
            try await laptop.patch(id: "n1", json: #"{"title":"from the laptop"}"#)
            let laptopToken = await laptop.token
            #expect(try await laptop.pendingWrites().first?.base == laptopToken)
            await phone.sync()
            await laptop.sync()
            let report = await laptop.lastPushReport
            let copy = try #require(report.copied.first, "\(report)")
            #expect(report.accepted == 1 && report.copied.count == 1 && copy.id == "n1" && copy.copy.hasPrefix("n1~conflict-"))
            // The original keeps the phone's edit; the copy holds the laptop's, pointing back.
            #expect(try await laptop.record(id: "n1")?["title"] == .string("from the phone"))
            #expect(try await laptop.record(id: copy.copy)?["title"] == .string("from the laptop"))
            #expect(try await laptop.record(id: copy.copy)?["conflictOf"] == .string("n1"))
            try await TwoWaySyncTests().settle(phone, world)
            #expect(try world.dump("phone") == (try world.export()))
            #expect(try world.dump("laptop") == (try world.export()))
        }
    }

    /// A device whose push landed but whose pull did not (a lost answer, a dead network)
    /// edits again from its old base: the change since is its own, so no copy is made.
    @Test func aDevicesOwnEarlierWriteIsNoConflict() async throws {
        try await TwoWaySyncTests().withWorld(forkCollections: ["notes"]) { world in
            let pullsFail = Locked(false)
            let proxy = try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
                method == "GET" && pullsFail.current ? .respond(status: 503, body: #"{"error":"unavailable","message":"later"}"#) : .forward
            }
            defer { proxy.stop() }
            let phone = try world.replica("phone", url: world.proxyURL(proxy))
            await phone.sync()
            let base = await phone.token
            pullsFail.withLock { $0 = true }
            try await phone.patch(id: "n1", json: #"{"title":"first"}"#)
            await phone.sync(ignoringBackoff: true)
            let token = await phone.token
            #expect(await phone.lastPushReport.accepted == 1 && token == base)
            try await phone.patch(id: "n1", json: #"{"title":"second"}"#)
            #expect(try await phone.pendingWrites(includeAcknowledged: false).first?.base == base)
            pullsFail.withLock { $0 = false }
            await phone.sync(ignoringBackoff: true)
            let report = await phone.lastPushReport
            #expect(report.copied.isEmpty && report.accepted == 1, "\(report)")
            #expect(try world.export().contains(#"{"body":"x","id":"n1","title":"second"}"#) && !(try world.export().contains("conflict")))
        }
    }
}
