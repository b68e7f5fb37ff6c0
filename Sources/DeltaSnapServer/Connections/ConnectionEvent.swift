import NIOCore
import NIOHTTPTypes

/// What the handlers that understand requests tell the connection's guard, which sees only
/// bytes: by a direct call to ``ConnectionGuardHandler/record(_:)`` on the same event loop
/// (a user event boxed in `Any` and cast back cost every request a few percent of a `304`).
package enum ConnectionEvent: Sendable {
    case headArrived
    case requestEnded
    case responseEnded
    /// A request answered from its raw bytes (``RawPollHandler``); `partialHead`: the start of
    /// another request is held.
    case answeredBeforeDecoder(partialHead: Bool)
}

/// Tells the guard where requests and responses begin and end, as the HTTP codec sees them:
/// right behind it, so requests answered by the fast path and by the router are both seen.
/// Made by Hummingbird's channel set-up, which knows no guard: ``PollingHTTP1Channel`` hands it
/// the connection's once both are in the pipeline.
final class RequestBoundaryHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    var connectionGuard: ConnectionGuardHandler?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head: connectionGuard?.record(.headArrived)
        case .end: connectionGuard?.record(.requestEnded)
        case .body: break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            context.write(data, promise: promise)
            connectionGuard?.record(.responseEnded)
        } else {
            context.write(data, promise: promise)
        }
    }
}
