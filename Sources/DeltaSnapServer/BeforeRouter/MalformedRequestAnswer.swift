import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// The answer to bytes the HTTP parser refuses (a malformed request line or header,
/// conflicting `Content-Length`s, `Content-Length` with `Transfer-Encoding`, a header block
/// over the limit, …): `400` with the JSON error body every other error has, then a close, as
/// RFC 9112 §11.2 asks for a request whose framing cannot be trusted.
///
/// Hummingbird answers a parser error with a bodyless `400`. ``FastPathHandler``, between the
/// HTTP codec and Hummingbird, takes the error first and decides (``FastPathConnectionState``):
/// it writes this answer only while no request is with the router — an error inside a
/// request's body reaches that request's handler instead (as `400 unreadable_body`), so a
/// connection never gets two answers to one request.
enum MalformedRequestAnswer {
    /// Writes the `400` for `error` and closes the connection once it is out.
    static func write(_ error: HTTPParserError, metrics: ServerMetrics, context: ChannelHandlerContext) {
        let body = APIError.jsonBody(code: "malformed_request", message: "the request is not valid HTTP/1.1 (\(describe(error))); the connection is closed")
        var buffer = context.channel.allocator.buffer(capacity: body.count)
        buffer.writeBytes(body)
        let head = HTTPResponse(status: .badRequest, headerFields: [
            .contentType: "application/json", .contentLength: String(body.count), .connection: "close", .cacheControl: "no-store",
        ])
        metrics.countResponse(route: "malformed", status: 400)
        context.write(NIOAny(HTTPResponsePart.head(head)), promise: nil)
        context.write(NIOAny(HTTPResponsePart.body(buffer)), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(NIOAny(HTTPResponsePart.end(nil))).whenComplete { _ in
            bound.value.close(promise: nil)
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
