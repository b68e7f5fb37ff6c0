import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Queued writes to one record fold into one before they are sent (issue 21, "fewer calls"),
/// counted at a proxy in front of a real server; a write that left the device never changes.
@Suite struct CoalescedWritesTests {
    /// A proxy that forwards everything and counts the pushes (POSTs) it saw.
    final class PushCounter: Sendable {
        let pushes = Locked(0)
        let failing: Locked<Bool>
        let proxy: FaultProxy

        init(_ world: TwoWaySyncTests.World, failing: Bool = false) throws {
            let pushes = self.pushes
            let failing = Locked(failing)
            self.failing = failing
            proxy = try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
                guard method == "POST" else { return .forward }
                pushes.withLock { $0 += 1 }
                return failing.current ? .respond(status: 503, body: #"{"error":"unavailable","message":"try later"}"#) : .forward
            }
        }

        /// A replica that talks through this proxy, synced once.
        func syncedReplica(in world: TwoWaySyncTests.World) async throws -> DeltaSnapReplica {
            let phone = try world.replica("phone", url: world.proxyURL(proxy))
            await phone.sync()
            return phone
        }
    }

    @Test func aToggleMadeFiveTimesOfflinePushesOneWrite() async throws {
        try await TwoWaySyncTests().withWorld { world in
            let counter = try PushCounter(world)
            defer { counter.proxy.stop() }
            let phone = try await counter.syncedReplica(in: world)
            for on in [true, false, true, false, true] {
                try await phone.patch(id: "n1", json: #"{"recommended":\#(on)}"#)
            }
            let queued = try await phone.pendingWrites()
            #expect(queued.count == 1 && queued.first?.value == .object([JSONMember("recommended", .bool(true))]), "\(queued)")
            await phone.sync()
            #expect(counter.pushes.current == 1)
            #expect(await phone.lastPushReport.accepted == 1)
            #expect(try world.export().contains(#"{"body":"x","id":"n1","recommended":true,"title":"a"}"#))
            #expect(try await phone.pendingWrites().isEmpty)
            #expect(try world.dump("phone") == (try world.export()))
        }
    }

    @Test func anInsertDeletedBeforeItWasPushedSendsNothing() async throws {
        try await TwoWaySyncTests().withWorld { world in
            let counter = try PushCounter(world)
            defer { counter.proxy.stop() }
            let phone = try await counter.syncedReplica(in: world)
            try await phone.insert(id: "draft", json: #"{"title":"never mind"}"#)
            try await phone.patch(id: "draft", json: #"{"body":"…"}"#)
            try await phone.delete(id: "draft")
            #expect(try await phone.pendingWrites().isEmpty)
            #expect(try await phone.record(id: "draft") == nil)
            await phone.sync()
            #expect(counter.pushes.current == 0)
            #expect(try !world.export().contains("draft"))
        }
    }

    @Test func aCreateOnlyInsertKeepsItsRefusal() async throws {
        try await TwoWaySyncTests().withWorld { world in
            let phone = try world.replica("phone")
            await phone.sync()
            try await phone.insert(id: "q1", json: #"{"v":1}"#)
            try await phone.put(id: "q1", json: #"{"v":2}"#)
            #expect(try await phone.pendingWrites().map(\.operation) == [.insert, .put])
            // Someone else created q1 first: the insert is refused, the put still lands.
            let laptop = try world.replica("laptop")
            await laptop.sync()
            try await laptop.insert(id: "q1", json: #"{"v":0}"#)
            await laptop.sync()
            await phone.sync()
            let report = await phone.lastPushReport
            #expect(report.refused.map(\.refusal.code) == ["exists"] && report.accepted == 1, "\(report)")
            #expect(try world.export().contains(#"{"id":"q1","v":2}"#))
        }
    }

    /// A push that left (and failed) marks its writes as sent: a later edit of the same record
    /// is queued apart, and the retry sends the first write exactly as it was.
    @Test func aWriteThatLeftTheDeviceIsNeverChanged() async throws {
        try await TwoWaySyncTests().withWorld { world in
            let counter = try PushCounter(world, failing: true)
            defer { counter.proxy.stop() }
            let phone = try world.replica("phone", url: world.proxyURL(counter.proxy))
            await phone.sync()
            try await phone.patch(id: "n1", json: #"{"title":"first"}"#)
            await phone.sync(ignoringBackoff: true)
            #expect(counter.pushes.current == 1)
            try await phone.patch(id: "n1", json: #"{"title":"second"}"#)
            try await phone.patch(id: "n1", json: #"{"title":"third"}"#)  // folds into the unsent one
            let queued = try await phone.pendingWrites()
            #expect(queued.map(\.seq) == [1, 2], "\(queued)")
            #expect(queued.first?.value == .object([JSONMember("title", .string("first"))]))
            #expect(try await phone.record(id: "n1")?["title"] == .string("third"))
            counter.failing.withLock { $0 = false }
            await phone.sync(ignoringBackoff: true)
            #expect(await phone.lastPushReport.accepted == 2)
            #expect(try world.export().contains(#"{"body":"x","id":"n1","title":"third"}"#))
        }
    }
}
