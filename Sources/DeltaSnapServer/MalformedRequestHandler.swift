import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// Answers bytes the HTTP parser refuses (a malformed request line or header, conflicting
/// `Content-Length`s, `Content-Length` with `Transfer-Encoding`, a header block over the
/// limit, …) with `400` and the JSON error body every other error has, then closes the
/// connection, as RFC 9112 §11.2 asks for a request whose framing cannot be trusted.
///
/// Hummingbird answers a parser error with a bodyless `400`; this handler sits between the
/// HTTP codec and Hummingbird (`HTTP1Channel.Configuration.additionalChannelHandlers`) and
/// takes the error first. It answers only while no request is in flight on the connection:
/// an error inside a request's body reaches that request's handler instead (as
/// `400 unreadable_body`), so a connection never gets two answers to one request.
final class MalformedRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let metrics: ServerMetrics
    /// Requests with the router whose response has not ended yet, counted by
    /// ``FastPathHandler`` (a request it answers itself is over before the next read).
    private let routed: RoutedRequests
    private var answered = false

    init(metrics: ServerMetrics, routed: RoutedRequests) {
        self.metrics = metrics
        self.routed = routed
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parserError = error as? HTTPParserError, routed.count == 0 else {
            context.fireErrorCaught(error)
            return
        }
        guard !answered else { return }
        answered = true
        let body = APIError.jsonBody(code: "malformed_request", message: "the request is not valid HTTP/1.1 (\(Self.describe(parserError))); the connection is closed")
        var buffer = context.channel.allocator.buffer(capacity: body.count)
        buffer.writeBytes(body)
        let head = HTTPResponse(status: .badRequest, headerFields: [
            .contentType: "application/json", .contentLength: String(body.count), .connection: "close", .cacheControl: "no-store",
        ])
        metrics.countResponse(route: "malformed", status: 400)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(buffer)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            context.close(promise: nil)
        }
    }

    /// A short, stable phrase per parser error (its `description` is the enum case name).
    private static func describe(_ error: HTTPParserError) -> String {
        switch error {
        case .headerOverflow: "the header block is too large"
        case .invalidContentLength, .unexpectedContentLength: "an invalid Content-Length"
        case .invalidChunkSize: "an invalid chunk size"
        case .invalidMethod: "an invalid method"
        case .invalidURL, .invalidPath, .invalidQueryString: "an invalid request target"
        case .invalidVersion: "an invalid HTTP version"
        case .invalidHeaderToken, .invalidConstant, .lfExpected: "a malformed header"
        default: "malformed framing or headers"
        }
    }
}
