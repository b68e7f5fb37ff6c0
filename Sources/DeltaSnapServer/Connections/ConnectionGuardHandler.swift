import NIOCore

/// The first handler of every connection: feeds the connection's ``ConnectionClock`` with
/// what it sees (bytes in, reads asked for, writability) and what the HTTP handlers behind it
/// tell (``ConnectionEvent``), and closes the connection when its ``ConnectionSweeper`` finds
/// a timeout run out. An idle connection is also one the cap may reclaim, oldest first.
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private(set) var clock: ConnectionClock
    private let sweeper: ConnectionSweeper
    private var context: ChannelHandlerContext?
    /// The position in the sweeper's list (kept by the sweeper).
    var slot = -1
    /// Links in the sweeper's list of idle connections, oldest first.
    var idlePrevious: ConnectionGuardHandler?
    var idleNext: ConnectionGuardHandler?
    var isListedIdle = false

    init(sweeper: ConnectionSweeper, openedAt now: NIODeadline) {
        self.sweeper = sweeper
        clock = ConnectionClock(openedAt: now)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        sweeper.add(self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        sweeper.remove(self)
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        sweeper.remove(self)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        update { $0.bytesArrived(at: .now()) }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        clock.readRequested(at: .now())
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        clock.writabilityChanged(isWritable: context.channel.isWritable, at: .now())
        context.fireChannelWritabilityChanged()
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let event = event as? ConnectionEvent else {
            return context.triggerUserOutboundEvent(event, promise: promise)
        }
        switch event {
        case .headArrived: update { $0.headArrived() }
        case .requestEnded: update { $0.requestEnded() }
        case .responseEnded: update { $0.responseEnded(at: .now()) }
        case .answeredBeforeDecoder(let partialHead): update { $0.answeredBeforeDecoder(at: .now(), partialHead: partialHead) }
        }
        promise?.succeed()
    }

    /// Applies `change`, keeping the sweeper's idle list in step.
    private func update(_ change: (inout ConnectionClock) -> Void) {
        let wasIdle = clock.isIdle
        change(&clock)
        let isIdle = clock.isIdle
        if wasIdle != isIdle { sweeper.idleChanged(self, isIdle: isIdle) }
    }

    /// Closes the connection for `timeout`. A head that never arrived is answered `408`
    /// first, as nginx does; anything else is closed as it is (a response may be under way).
    func timeOut(_ timeout: ConnectionTimeout) {
        guard let context else { return }
        sweeper.remove(self)
        if timeout == .head {
            let body = APIError.jsonBody(code: "request_timeout", message: "the request head did not arrive in time; the connection is closed")
            var buffer = context.channel.allocator.buffer(capacity: 160 + body.count)
            buffer.writeString("HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n")
            buffer.writeBytes(body)
            context.writeAndFlush(wrapOutboundOut(.byteBuffer(buffer))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        } else {
            context.close(promise: nil)
        }
    }

    /// Closes an idle connection to make room for a new one.
    func reclaim() {
        context?.close(promise: nil)
    }
}
