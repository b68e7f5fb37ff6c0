@testable import DeltaSnapServer
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Prometheus
import Testing

/// The guard and its loop's sweeper on `EmbeddedChannel`s, no socket: which connections the
/// idle list holds, in which order, as requests come and go.
@Suite struct ConnectionGuardTests {
    /// Stands for the handlers behind the guard: answers each read at once, as
    /// ``RawPollHandler`` answers a poll, or hands it on unanswered, as to the router.
    final class Answering: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let connectionGuard: ConnectionGuardHandler
        var answers = true

        init(_ connectionGuard: ConnectionGuardHandler) { self.connectionGuard = connectionGuard }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if answers { connectionGuard.record(.answeredBeforeDecoder(partialHead: false)) } else { connectionGuard.record(.headArrived) }
        }
    }

    struct Connection {
        let channel: EmbeddedChannel
        let handler: ConnectionGuardHandler
        let answering: Answering

        /// One request's bytes, in one read.
        func request() throws { try channel.writeInbound(ByteBuffer(string: "GET / HTTP/1.1\r\n\r\n")) }
    }

    let loop = EmbeddedEventLoop()
    let idle = NIOLockedValueBox(IdleSummary())
    let sweeper: ConnectionSweeper

    init() {
        sweeper = ConnectionSweeper(
            eventLoop: loop, limits: ConnectionLimits(maximumConnections: 10), metrics: ConnectionMetrics(factory: PrometheusMetricsFactory()), idle: idle)
    }

    func connect() throws -> Connection {
        let handler = ConnectionGuardHandler(sweeper: sweeper, openedAt: .now())
        let answering = Answering(handler)
        let channel = EmbeddedChannel(handlers: [handler, answering], loop: loop)
        try channel.connect(to: .init(ipAddress: "127.0.0.1", port: 1)).wait()
        return Connection(channel: channel, handler: handler, answering: answering)
    }

    @Test func aConnectionAnsweredAgainGoesToTheBackOfTheIdleList() throws {
        let (a, b, c) = (try connect(), try connect(), try connect())
        #expect(idle.withLockedValue { $0.count } == 0, "a fresh connection owes its head: not idle")
        for connection in [a, b, c] { try connection.request() }
        #expect(idle.withLockedValue { $0.count } == 3)
        #expect(idle.withLockedValue { $0.oldestSince } == a.handler.listedIdleSince)

        try a.request()
        #expect(idle.withLockedValue { $0.count } == 3)
        #expect(idle.withLockedValue { $0.oldestSince } == b.handler.listedIdleSince, "a polled again: b is idle the longest")
        #expect(sweeper.reclaimOldestIdle())
        #expect(!b.channel.isActive && a.channel.isActive && c.channel.isActive, "the cap reclaimed b, idle the longest")
        #expect(idle.withLockedValue { $0.count } == 2)
    }

    @Test func aRequestHandedOnIsNotIdleUntilItsResponseEnds() throws {
        let (a, b) = (try connect(), try connect())
        try a.request()
        b.answering.answers = false
        try b.request()
        #expect(idle.withLockedValue { $0.count } == 1, "b's request is with the router")
        #expect(b.handler.listedIdleSince == nil)

        b.handler.record(.requestEnded)
        b.handler.record(.responseEnded)
        #expect(idle.withLockedValue { $0.count } == 2, "its response ended outside a read: listed at once")
        #expect(b.handler.listedIdleSince! > a.handler.listedIdleSince!)
        #expect(sweeper.reclaimOldestIdle() && !a.channel.isActive && b.channel.isActive)
        #expect(sweeper.reclaimOldestIdle() && !b.channel.isActive)
        #expect(!sweeper.reclaimOldestIdle(), "none idle is left")
    }
}
