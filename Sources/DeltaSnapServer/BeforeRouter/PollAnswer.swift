import DeltaSnapCore
import DeltaSnapStore
import HTTPTypes
import NIOCore

/// A poll answered with a body: status `200`, its headers and its bytes, with every response
/// rule applied once — validators, content type and encoding, `Content-Length` — and the
/// status line and headers also encoded once, for the byte-level handler. The router's path,
/// ``FastPathHandler`` and ``RawPollHandler`` only serialise it (each adds `Date` and the
/// request id by ``ResponseIdentity``); the body is shared, never copied.
struct PollAnswer: Sendable {
    let head: CollectionHead
    /// Everything but `Date` and `X-Request-Id`.
    let headers: HTTPFields
    let body: ByteBuffer
    /// `HTTP/1.1 200 OK` and ``headers``, CRLF-terminated lines (no empty line yet).
    let encodedHead: ByteBuffer

    init(head: CollectionHead, body: ByteBuffer, gzip: Bool) {
        self.head = head
        self.body = body
        var headers = Self.bodyHeaders(for: head, gzip: gzip)
        headers[.contentLength] = String(body.readableBytes)
        self.headers = headers
        encodedHead = headers.encodedHead(statusLine: "HTTP/1.1 200 OK")
    }

    /// The headers of any body answer for `head` (a full body or a delta, cached or streamed).
    static func bodyHeaders(for head: CollectionHead, gzip: Bool) -> HTTPFields {
        var headers = ServedHead.validatorHeaders(for: head)
        headers[.contentType] = "application/json"
        if gzip { headers[.contentEncoding] = "gzip" }
        return headers
    }
}

/// The `X-Request-Id` and log-line rule every layer follows: an unlogged `304` (most of the
/// traffic, and no news) carries only the client's own safe id and writes no line; every
/// other answer carries the client's safe id or a new one, and logs one line with it.
struct ResponseIdentity: Equatable {
    /// The id to send, or nil.
    var requestID: String?
    /// Whether the answer writes its `request` log line.
    var logged: Bool

    init(status: HTTPResponse.Status, clientsID header: String?, logNotModified: Bool, newID: () -> String) {
        let clientsID = RequestIdentifier.echoed(header)
        if status == .notModified && !logNotModified {
            self.requestID = clientsID
            logged = false
        } else {
            self.requestID = clientsID ?? newID()
            logged = true
        }
    }
}

extension HTTPFields {
    /// `statusLine` and these fields as the bytes of an HTTP/1.1 response head, each line
    /// CRLF-ended, without the empty line: made once for an answer written before NIO's
    /// encoder (which adds `Date` and the request id after it).
    func encodedHead(statusLine: String) -> ByteBuffer {
        var encoded = ByteBuffer(string: statusLine + "\r\n")
        for field in self {
            encoded.writeString(field.name.rawName)
            encoded.writeString(": ")
            encoded.writeString(field.value)
            encoded.writeString("\r\n")
        }
        return encoded
    }
}
