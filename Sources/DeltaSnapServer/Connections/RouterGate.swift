import NIOCore
import NIOHTTPTypes

/// Holds a connection's Hummingbird task back until a request reaches the router.
///
/// Hummingbird runs one task per connection, and a task keeps the allocator slabs of its
/// deepest call for as long as it lives (docs/BENCHMARKS.md, "where a held connection's memory
/// goes"). Most connections never need it: polls are answered from memory and live waits are
/// parked by the handlers before the router. So the task waits on this gate with one small
/// frame, and enters Hummingbird's request loop only when the first request part passes the
/// handlers in front (this one sits last among them, just before Hummingbird's own), or when
/// the connection ends (its loop then sees the end at once and returns).
final class RouterGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    /// Made when the handler joins its pipeline (the handlers are made before the channel's loop is known).
    private var opened: EventLoopPromise<Void>?
    private var isOpen = false

    /// Completes when the router is needed or the connection ended (nil before the handler is added).
    var routerNeeded: EventLoopFuture<Void>? { opened?.futureResult }

    func handlerAdded(context: ChannelHandlerContext) {
        opened = context.eventLoop.makePromise()
    }

    /// Lets the task in (idempotent; on the channel's event loop).
    private func open() {
        guard !isOpen else { return }
        isOpen = true
        opened?.succeed()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        open()
        context.fireChannelRead(data)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The client finished sending: Hummingbird's loop decides what that means.
        if let event = event as? ChannelEvent, event == .inputClosed { open() }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        open()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        open()
    }
}
