import NIOCore
import NIOHTTPTypes

/// What the handlers that understand requests tell the connection's guard, which sees only
/// bytes: sent as outbound user events, which travel to the front of the pipeline where
/// ``ConnectionGuardHandler`` takes them.
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
final class RequestBoundaryHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head: context.triggerUserOutboundEvent(ConnectionEvent.headArrived, promise: nil)
        case .end: context.triggerUserOutboundEvent(ConnectionEvent.requestEnded, promise: nil)
        case .body: break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            context.write(data, promise: promise)
            context.triggerUserOutboundEvent(ConnectionEvent.responseEnded, promise: nil)
        } else {
            context.write(data, promise: promise)
        }
    }
}
