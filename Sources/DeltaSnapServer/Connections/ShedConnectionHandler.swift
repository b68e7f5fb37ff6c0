import NIOCore

/// The whole life of a connection refused at the cap: `503` with `Retry-After` and
/// `Connection: close` at once, then the write side closed and whatever the client sends
/// read and dropped until it closes too, or ``linger`` has passed. Closing outright with
/// unread request bytes would reset the connection, and a client could lose the `503`
/// before reading it; the linger is short so that refusing keeps pace with a flood.
final class ShedConnectionHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    static let linger: TimeAmount = .milliseconds(200)
    static let retryAfterSeconds = 1

    static let response: [UInt8] = {
        let body = APIError.jsonBody(
            code: "over_capacity", message: "the server holds as many connections as it may; retry after \(retryAfterSeconds) s")
        let head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n"
            + "Retry-After: \(retryAfterSeconds)\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n"
        return Array(head.utf8) + body
    }()

    /// The `503` has been written (and the write side closed).
    private var answered = false
    /// What the client sent so far has been read: a close now sends no reset.
    private var drained = false

    func channelActive(context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: Self.response.count)
        buffer.writeBytes(Self.response)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.writeAndFlush(NIOAny(buffer)).whenComplete { _ in
            let (handler, context) = loopBound.value
            handler.answered = true
            context.close(mode: .output, promise: nil)
            if handler.drained { context.close(promise: nil) }
        }
        let channel = context.channel
        context.eventLoop.scheduleTask(in: Self.linger) { channel.close(promise: nil) }
        context.fireChannelActive()
    }

    /// The request is read and dropped: nothing behind this handler sees it.
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    /// Closed as soon as the answer is out and what arrived is read, so refusing keeps pace
    /// with a flood of clients that never close.
    func channelReadComplete(context: ChannelHandlerContext) {
        drained = true
        if answered { context.close(promise: nil) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event { context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
