import NIOCore

/// The first handler of every connection: feeds the connection's ``ConnectionClock`` with
/// what it sees (bytes in, reads asked for, writability) and what the HTTP handlers behind it
/// tell (``ConnectionEvent``), and closes the connection when its ``ConnectionSweeper`` finds
/// a timeout run out. An idle connection is also one the cap may reclaim, oldest first.
///
/// A keep-alive poll answered within one read goes idle → busy → idle: the sweeper's idle
/// list is brought in step once, when the read ends, not at each step (a request costs one
/// list move and at most one clock read per event).
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
    /// Since when the idle list has it idle (nil: not listed); kept by the sweeper.
    var listedIdleSince: NIODeadline?
    /// Inside a read: the idle list is synced when it completes.
    private var reading = false

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
        reading = true
        clock.bytesArrived(at: .now())
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        syncIdleList()
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if !clock.isStarved { clock.readRequested(at: .now()) }
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        clock.writabilityChanged(isWritable: context.channel.isWritable, at: .now())
        context.fireChannelWritabilityChanged()
    }

    /// What a handler behind this one saw of a request or a response (on this event loop).
    func record(_ event: ConnectionEvent) {
        switch event {
        case .headArrived: clock.headArrived()
        case .requestEnded: clock.requestEnded()
        case .responseEnded: clock.responseEnded(at: .now())
        case .answeredBeforeDecoder(let partialHead): clock.answeredBeforeDecoder(at: .now(), partialHead: partialHead)
        }
        // A response written later (the router's) lands outside a read.
        if !reading { syncIdleList() }
    }

    private func syncIdleList() {
        if clock.idleSince != listedIdleSince { sweeper.syncIdle(self) }
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
