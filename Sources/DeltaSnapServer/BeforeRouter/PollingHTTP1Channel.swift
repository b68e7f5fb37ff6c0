import HummingbirdCore
import Logging
import NIOCore

/// Hummingbird's HTTP/1.1 child channel with ``ConnectionGuardHandler`` (timeouts, the idle
/// list) and ``RawPollHandler`` put in front of its HTTP codec (Hummingbird's own
/// `additionalChannelHandlers` go behind it) — or, for a connection refused at the cap, only
/// ``ShedConnectionHandler``.
struct PollingHTTP1Channel: ServerChildChannel {
    /// Hummingbird's connection, and when its request loop is needed (``RouterGate``).
    struct Value: ServerChildChannelValue {
        let http: HTTP1Channel.Value
        let routerNeeded: EventLoopFuture<Void>?
        var channel: any Channel { http.channel }
    }

    let http1: HTTP1Channel
    let answers: MemoryAnswers
    let governor: ConnectionGovernor
    /// The server's logger, for the request log lines of the answers given here.
    let requestLogger: Logger

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        // Decided before anything is set up: a refused connection costs a canned answer.
        let admission = governor.admit(channel)
        return http1.setup(channel: channel, logger: logger).flatMapThrowing { http in
            let gate = try? channel.pipeline.syncOperations.handler(type: RouterGate.self)
            let value = Value(http: http, routerNeeded: gate?.routerNeeded)
            guard case .admitted(let sweeper) = admission else {
                try channel.pipeline.syncOperations.addHandler(ShedConnectionHandler(), position: .first)
                return value
            }
            // A poll is a few hundred bytes, and thousands of connections may sit idle on a
            // held request: reads start at 512 bytes, not NIO's 2 KB (1.5 KB less per waiting
            // connection, docs/BENCHMARKS.md), and grow for larger requests.
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65536))
            let connectionGuard = ConnectionGuardHandler(sweeper: sweeper, openedAt: .now())
            try channel.pipeline.syncOperations.addHandler(RawPollHandler(answers: answers, logger: requestLogger, connectionGuard: connectionGuard), position: .first)
            try channel.pipeline.syncOperations.addHandler(connectionGuard, position: .first)
            (try? channel.pipeline.syncOperations.handler(type: RequestBoundaryHandler.self))?.connectionGuard = connectionGuard
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        if let routerNeeded = value.routerNeeded {
            // One small frame while the connection is served before the router (polls, parked waits).
            await withTaskCancellationHandler {
                _ = try? await routerNeeded.get()
            } onCancel: {
                value.channel.close(promise: nil)
            }
        }
        await http1.handle(value: value.http, logger: logger)
    }
}
