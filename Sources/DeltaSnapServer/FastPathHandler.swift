import DeltaSnapCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes

/// Answers the polls that need nothing but memory — a current token (`304`) or an older one
/// whose delta is cached — on the connection's event loop, before the request reaches
/// Hummingbird's router: no task, no async hop, no router or middleware. Most of a
/// deployment's traffic is exactly these polls.
///
/// What to answer is ``DeltaSnapAPI/fastAnswer(to:start:)``'s call (the decision table's,
/// with the same headers and metrics as the router's path); this type is only the NIO
/// plumbing. It answers only while no earlier request of the connection is with the router,
/// so responses never overtake each other, and it drops the answered request's remaining
/// parts (its end, and a body should a GET carry one).
final class FastPathHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let service: DeltaSnapAPI
    private let requestLog: RequestLog
    /// Read once: the configuration is a large value, and this is read per answer.
    private let logNotModified: Bool
    /// Requests handed to the router whose response has not ended yet (shared with
    /// ``MalformedRequestHandler``).
    private let routed: RoutedRequests
    /// Dropping the rest of a request this handler answered.
    private var droppingRequestParts = false
    private var needsFlush = false
    private var date = DateHeader()

    init(service: DeltaSnapAPI, logger: Logger, routed: RoutedRequests) {
        self.routed = routed
        self.service = service
        requestLog = RequestLog(logger: logger, output: service.configuration.requestLogOutput)
        logNotModified = service.configuration.logNotModified
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            let start = ContinuousClock.now
            if routed.count == 0, let answer = service.fastAnswer(to: request, start: start) {
                droppingRequestParts = true
                write(answer, to: request, start: start, context: context)
                return
            }
            routed.count += 1
            context.fireChannelRead(data)
        case .body:
            if !droppingRequestParts { context.fireChannelRead(data) }
        case .end:
            if droppingRequestParts {
                droppingRequestParts = false
            } else {
                context.fireChannelRead(data)
            }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // One flush per read: pipelined polls that arrived together leave together.
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { routed.count -= 1 }
        context.write(data, promise: promise)
    }

    private func write(_ answer: FastAnswer, to request: HTTPRequest, start: ContinuousClock.Instant, context: ChannelHandlerContext) {
        let (status, fields, body): (HTTPResponse.Status, HTTPFields, ByteBuffer?) = switch answer {
        case .notModified(let served): (.notModified, served.validatorHeaders, nil)
        case .delta(let cached): (.ok, cached.headers, cached.body)
        }
        let identity = ResponseIdentity(
            status: status, clientsID: request.headerFields[.xRequestID], logNotModified: logNotModified,
            newID: { RequestID().description })
        var headers = fields
        headers[.date] = date.now()
        if let requestID = identity.requestID { headers[.xRequestID] = requestID }
        context.write(wrapOutboundOut(.head(HTTPResponse(status: status, headerFields: headers))), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(body)), promise: nil) }
        context.write(wrapOutboundOut(.end(nil)), promise: nil)
        needsFlush = true
        if identity.logged, let requestID = identity.requestID {
            requestLog.write(
                requestID: requestID, method: request.method, path: request.path ?? "",
                status: status, since: start, bytes: body?.readableBytes)
        }
    }
}

/// How many of a connection's requests are with the router (their response not ended): the
/// fast path answers only when none is, and so does ``MalformedRequestHandler``. One per
/// connection, used on its event loop only.
final class RoutedRequests {
    var count = 0
}

/// The `Date` header's value, formatted once per second (one per connection handler: no lock).
struct DateHeader {
    private var second: Int64 = -1
    private var value = ""

    mutating func now() -> String {
        let current = Int64(Date().timeIntervalSince1970)
        if current != second {
            second = current
            value = HTTPDate.format(current)
        }
        return value
    }
}
