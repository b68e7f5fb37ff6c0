import DeltaSnapClient
import DeltaSnapSQLiteStore
@testable import DeltaSnapServer
import DeltaSnapTestSupport
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// A connection's clock as a plain value: which timeout runs in which phase.
@Suite struct ConnectionClockTests {
    let limits: ConnectionLimits = {
        var limits = ConnectionLimits(maximumConnections: 10)
        limits.headerTimeout = .seconds(60)
        limits.bodyTimeout = .seconds(30)
        limits.idleTimeout = .seconds(75)
        limits.sendTimeout = .seconds(20)
        return limits
    }()
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    func at(_ seconds: Int64) -> NIODeadline { start + .seconds(seconds) }

    @Test func aFreshConnectionOwesItsHeadWithinTheHeaderTimeout() {
        let clock = ConnectionClock(openedAt: start)
        #expect(clock.expired(at: at(59), limits: limits) == nil)
        #expect(clock.expired(at: at(60), limits: limits) == .head)
    }

    @Test func aRequestBeingAnsweredIsNeverTimedOutHoweverLong() {
        var clock = ConnectionClock(openedAt: start)
        clock.bytesArrived(at: at(1))
        clock.headArrived()
        clock.requestEnded()
        clock.readRequested(at: at(1))
        #expect(clock.phase == .responding)
        #expect(clock.expired(at: at(86_400), limits: limits) == nil)
    }

    @Test func afterAResponseTheIdleTimeoutRunsAndTheNextBytesStartAHeadClock() {
        var clock = ConnectionClock(openedAt: start)
        clock.headArrived()
        clock.requestEnded()
        clock.responseEnded(at: at(10))
        #expect(clock.isIdle)
        #expect(clock.expired(at: at(84), limits: limits) == nil)
        #expect(clock.expired(at: at(85), limits: limits) == .idle)
        clock.bytesArrived(at: at(80))
        #expect(clock.phase == .awaitingHead(since: at(80)))
        #expect(clock.expired(at: at(139), limits: limits) == nil)
        #expect(clock.expired(at: at(140), limits: limits) == .head)
    }

    @Test func aBodyTimesOutOnlyWhileTheServerAskedForBytesThatDidNotCome() {
        var clock = ConnectionClock(openedAt: start)
        clock.headArrived()
        // Back-pressure: the server asks for nothing, so a quiet client is not at fault.
        #expect(clock.expired(at: at(1_000), limits: limits) == nil)
        clock.readRequested(at: at(1_000))
        clock.readRequested(at: at(1_020))   // asked again: the clock still runs from the first
        #expect(clock.expired(at: at(1_029), limits: limits) == nil)
        clock.bytesArrived(at: at(1_029))
        clock.readRequested(at: at(1_029))
        #expect(clock.expired(at: at(1_058), limits: limits) == nil)
        #expect(clock.expired(at: at(1_059), limits: limits) == .body)
    }

    @Test func aResponseTheClientStopsReadingTimesOutAfterTheSendTimeout() {
        var clock = ConnectionClock(openedAt: start)
        clock.headArrived()
        clock.requestEnded()
        clock.writabilityChanged(isWritable: false, at: at(5))
        #expect(clock.expired(at: at(24), limits: limits) == nil)
        #expect(clock.expired(at: at(25), limits: limits) == .send)
        clock.writabilityChanged(isWritable: true, at: at(24))
        #expect(clock.expired(at: at(100), limits: limits) == nil)
    }

    @Test func pipelinedRequestsKeepTheConnectionBusyUntilTheLastResponse() {
        var clock = ConnectionClock(openedAt: start)
        clock.headArrived()
        clock.requestEnded()
        clock.headArrived()
        clock.requestEnded()
        clock.responseEnded(at: at(1))
        #expect(!clock.isIdle)
        clock.responseEnded(at: at(2))
        #expect(clock.isIdle)
    }

    @Test func anAnswerBeforeTheDecoderWithTheNextHeadHeldStartsTheHeadClock() {
        var clock = ConnectionClock(openedAt: start)
        clock.answeredBeforeDecoder(at: at(3), partialHead: false)
        #expect(clock.phase == .idle(since: at(3)))
        clock.answeredBeforeDecoder(at: at(4), partialHead: true)
        #expect(clock.phase == .awaitingHead(since: at(4)))
    }
}

/// The cap and the room kept, from the open-file limit.
@Suite struct ConnectionLimitsTests {
    @Test(arguments: [256, 1024, 4096, 20_000, 1_048_576])
    func theCapLeavesRoomForTheStoreFilesAndTheRuntime(descriptorLimit: Int) {
        let limits = ConnectionLimits(descriptorLimit: descriptorLimit)
        let reserve = ConnectionLimits.reserve(descriptorLimit: descriptorLimit, storeReaders: limits.storeReaders)
        #expect(limits.maximumConnections > 0)
        #expect(limits.acceptingAtMost + limits.transferDescriptors + 3 * limits.storeReaders + 64 <= descriptorLimit)
        #expect(limits.maximumConnections + reserve + limits.transferDescriptors == descriptorLimit)
    }

    @Test func twentyThousandDescriptorsHoldEighteenThousandConnections() {
        #expect(ConnectionLimits(descriptorLimit: 20_000).maximumConnections >= 18_000)
    }
}

/// Timeouts and the cap against a real server on 127.0.0.1.
@Suite struct ConnectionLimitServerTests {
    static func limits(cap: Int = 100, timeout: Duration = .milliseconds(400)) -> ConnectionLimits {
        var limits = ConnectionLimits(maximumConnections: cap)
        limits.headerTimeout = timeout
        limits.bodyTimeout = timeout
        limits.idleTimeout = timeout
        limits.sendTimeout = timeout
        return limits
    }

    func withServer(_ limits: ConnectionLimits, _ body: @escaping @Sendable (TestServer) async throws -> Void) async throws {
        try await TestServer.with(
            seed: { try Fixtures.importText(Fixtures.ndjson(0..<20), into: try SQLiteDatabase(path: $0), collection: "items") },
            start: { try await TestServer.start(database: $0, connections: limits) }
        ) { server, _ in try await body(server) }
    }

    /// A figure of the server's `/metrics`, read in process: a request for it would be one
    /// more connection, counted against the small caps these tests set.
    func metric(_ server: TestServer, _ name: String) async throws -> Int {
        Self.metric(server, name)
    }

    static func metric(_ server: TestServer, _ name: String) -> Int {
        let text = server.service.metrics.render()
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + " ") }
        return line.flatMap { Int(Double($0.split(separator: " ").last!) ?? -1) } ?? 0
    }

    /// Sends `bytes` on a new connection and reports whether the server closed it within
    /// `seconds` (reading and dropping whatever it answered).
    static func sendsAndIsClosed(_ bytes: String, port: Int, within seconds: Int) throws -> Bool {
        let socket = try LoopbackSocket.connect(to: port)
        defer { close(socket) }
        let request = Array(bytes.utf8)
        _ = request.withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
        return closedByServer(socket, within: seconds)
    }

    /// Reads until the server closes the connection; false when it is still open after `seconds`.
    static func closedByServer(_ socket: Int32, within seconds: Int) -> Bool {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
            if count == 0 { return true }
            if count < 0 { return errno == ECONNRESET }
        }
    }

    @Test func aHalfSentHeadIsAnswered408AndClosedAfterTheHeaderTimeout() async throws {
        try await withServer(Self.limits()) { server in
            let response = try await offPool { () -> RawHTTPClient.Response? in
                let client = try server.connect()
                return try client.sendRaw(Array("GET /v1/collections/items HTT".utf8), method: "GET")
            }
            #expect(response?.status == 408)
            #expect(response?.header("Connection") == "close")
            #expect(try await metric(server, #"deltasnap_connection_timeouts_total{kind="head"}"#) == 1)
        }
    }

    @Test func anIdleKeepAliveConnectionIsClosedAfterTheIdleTimeout() async throws {
        try await withServer(Self.limits()) { server in
            let closed = try await offPool {
                try Self.sendsAndIsClosed("GET /v1/collections/items HTTP/1.1\r\nHost: x\r\n\r\n", port: server.port, within: 10)
            }
            #expect(closed)
            #expect(try await metric(server, #"deltasnap_connection_timeouts_total{kind="idle"}"#) == 1)
        }
    }

    @Test func aHeldLongPollIsNeverCutByTheIdleOrHeaderTimeout() async throws {
        try await withServer(Self.limits(timeout: .milliseconds(200))) { server in
            let (status, seconds) = try await offPool { () -> (Int, Double) in
                let client = try server.connect()
                let etag = try #require(client.request("GET", "/v1/index").header("ETag"))
                let started = Date()
                let held = try client.request("GET", "/v1/index?wait=2", headers: ["If-None-Match": etag])
                // The same connection serves on after the wait.
                _ = try client.request("GET", "/v1/collections/items")
                return (held.status, Date().timeIntervalSince(started))
            }
            #expect(status == 304)
            #expect(seconds >= 1.9)
        }
    }

    @Test func aStalledBodyIsClosedAfterTheBodyTimeout() async throws {
        try await withServer(Self.limits()) { server in
            let closed = try await offPool {
                let head = "PUT /v1/collections/items/r1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(TestServer.writeToken)\r\nContent-Length: 100\r\n\r\n{\"a\":"
                return try Self.sendsAndIsClosed(head, port: server.port, within: 10)
            }
            #expect(closed)
            #expect(try await metric(server, #"deltasnap_connection_timeouts_total{kind="body"}"#) == 1)
        }
    }

    /// Answers given before the router honour `Connection: close` as the router's do: a
    /// client reading to the end of the connection is not left waiting for the idle timeout.
    @Test(arguments: ["/v1/index", "/v1/collections/items", "/healthz"])
    func connectionCloseIsHonouredWhoeverAnswers(path: String) async throws {
        try await withServer(Self.limits(timeout: .seconds(30))) { server in
            let closed = try await offPool {
                try Self.sendsAndIsClosed("GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", port: server.port, within: 5)
            }
            #expect(closed)
        }
    }

    /// A client refused at the cap says what the server said, keeps its data, and waits as
    /// asked: the `503`'s reason and `Retry-After` reach the app (and `deltasnap pull`).
    @Test func aClientRefusedAtTheCapReportsWhyAndWhenToRetry() async throws {
        try await withServer(Self.limits(cap: 1, timeout: .seconds(30))) { server in
            let slow = try LoopbackSocket.connect(to: server.port)
            defer { close(slow) }
            let bytes = Array("GET /v1/coll".utf8)
            _ = bytes.withUnsafeBytes { write(slow, $0.baseAddress, $0.count) }
            let deadline = Date().addingTimeInterval(10)
            while Self.metric(server, "deltasnap_connections_open") < 1, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let replica = try DeltaSnapReplica(
                path: dir.file("r.sqlite"), collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!)
            let now = Date()
            guard case .failed(let reason, let retryAfter) = await replica.pull(now: now, ignoringBackoff: true) else {
                Issue.record("a pull at the cap did not fail")
                return
            }
            #expect(reason.contains("503") && reason.contains("over_capacity"), "\(reason)")
            #expect(retryAfter.map { $0.timeIntervalSince(now) >= 1 } == true, "\(String(describing: retryAfter))")
        }
    }

    @Test func atTheCapTheOldestIdleConnectionMakesRoom() async throws {
        try await withServer(Self.limits(cap: 2, timeout: .seconds(30))) { server in
            try await offPool {
                let first = try server.connect()
                let second = try server.connect()
                #expect(try first.request("GET", "/v1/collections/items").status == 200)
                #expect(try second.request("GET", "/v1/collections/items").status == 200)
                // Both idle: a third is admitted, and the first (idle the longest) closed.
                let third = try server.connect()
                #expect(try third.request("GET", "/v1/collections/items").status == 200)
                #expect((try? first.request("GET", "/v1/collections/items"))?.status == nil, "the oldest idle connection was closed")
                #expect(try second.request("GET", "/v1/collections/items").status == 200)
            }
            #expect(try await metric(server, "deltasnap_connections_reclaimed_total") == 1)
        }
    }

    @Test func atTheCapWithNoneIdleANewConnectionIsAnswered503AtOnce() async throws {
        try await withServer(Self.limits(cap: 2, timeout: .seconds(30))) { server in
            let response = try await offPool { () -> RawHTTPClient.Response in
                // Two half-sent heads: busy, not idle, so nothing can be reclaimed.
                let slow = try (0..<2).map { _ in try LoopbackSocket.connect(to: server.port) }
                defer { slow.forEach { close($0) } }
                for socket in slow {
                    let bytes = Array("GET /v1/coll".utf8)
                    _ = bytes.withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
                }
                // Both accepted and counted before the third connects.
                let deadline = Date().addingTimeInterval(10)
                while Self.metric(server, "deltasnap_connections_open") < 2, Date() < deadline { usleep(10_000) }
                return try RawHTTPClient(port: server.port, timeoutSeconds: 5).request("GET", "/v1/collections/items")
            }
            #expect(response.status == 503)
            #expect(response.header("Retry-After") == "1")
            #expect(response.header("Connection") == "close")
            #expect(response.text.contains("over_capacity"))
            #expect(try await metric(server, #"deltasnap_connections_shed_total{reason="cap"}"#) == 1)
        }
    }
}

/// Files opened per download are counted: none past the gate, each slot back when its file goes.
@Suite struct TransferGateTests {
    @Test func aLargeBlobIsOpenedOnlyWhileASlotIsFree() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("blob")
        #expect(FileManager.default.createFile(atPath: path, contents: Data(count: Int(AttachmentMemory.smallBlobBytes) + 1)))
        let memory = AttachmentMemory(transferDescriptors: 1)
        let size = AttachmentMemory.smallBlobBytes + 1
        var first = memory.file(of: "a", size: size, at: { path })
        #expect(first != nil)
        #expect(memory.file(of: "a", size: size, at: { path }) == nil, "a second large file past the gate")
        first = nil
        #expect(memory.transfers.count == 0)
        #expect(memory.file(of: "a", size: size, at: { path }) != nil)
        // Small blobs' kept descriptors are not counted here: they give way to connections instead.
        let small = memory.file(of: "b", size: 10, at: { path })
        #expect(small != nil && memory.keptFileCount == 1 && memory.transfers.count == 0)
        memory.releaseKeptFiles(1)
        #expect(memory.keptFileCount == 0)
        _ = first
    }

    /// Kept descriptors stay within what connections leave them: past it, a small blob is
    /// opened for its download alone, through the gate, and closed after.
    @Test func smallBlobsAreKeptOnlyWithinTheRoomConnectionsLeave() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("blob")
        #expect(FileManager.default.createFile(atPath: path, contents: Data(count: 10)))
        let room = NIOLockedValueBox(1)
        let memory = AttachmentMemory(transferDescriptors: 1, roomToKeep: { room.withLockedValue { $0 } })
        #expect(memory.file(of: "a", size: 10, at: { path }) != nil && memory.keptFileCount == 1)
        var second = memory.file(of: "b", size: 10, at: { path })
        #expect(second != nil && memory.keptFileCount == 1 && memory.transfers.count == 1)
        #expect(memory.file(of: "c", size: 10, at: { path }) == nil, "no room kept and the gate full")
        second = nil
        room.withLockedValue { $0 = 2 }
        #expect(memory.file(of: "c", size: 10, at: { path }) != nil && memory.keptFileCount == 2 && memory.transfers.count == 0)
        _ = second
    }
}
