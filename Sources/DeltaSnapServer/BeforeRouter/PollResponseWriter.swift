import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// What every answer given before the router carries and costs, decided in one place: the
/// `Date`, the request id (``ResponseIdentity``: echoed, or new when the answer is logged),
/// its count in `/metrics` and its `request` log line. ``RawPollHandler`` writes the two
/// headers as bytes after a head encoded once, ``FastPathHandler`` as HTTP fields; the
/// router's answers get the same from ``ErrorAndMetricsMiddleware`` and Hummingbird, so an
/// answer is byte for byte the same whichever layer gave it (docs/ARCHITECTURE.md, "The
/// server's hot paths").
///
/// One per connection handler, used on its event loop only (the `Date` is formatted once a
/// second without a lock).
///
/// ```swift
/// var headers = served.validatorHeaders
/// let identity = writer.stamp(&headers, status: .notModified, clientsID: request.headerFields[.xRequestID])
/// context.write(…)
/// writer.finished(identity, route: .collection, method: .get, path: "/v1/collections/countries", status: .notModified, since: start, bodyBytes: nil)
/// ```
struct PollResponseWriter {
    /// Which route an answer belongs to, for its count: a collection's answers are counted
    /// when they are decided (by outcome and latency, ``ServerMetrics/countFastPathAnswer(_:since:)``);
    /// the index's here.
    enum Route {
        case collection
        case index
        /// A download, counted when it is decided (``ServerMetrics/countFastPathAttachmentAnswer(status:)``).
        case attachment
    }

    private var date = DateHeader()
    private let requestLog: RequestLog
    private let metrics: ServerMetrics
    /// Read once: the configuration is a large value, and this is read per answer.
    private let logNotModified: Bool

    init(answers: MemoryAnswers, logger: Logger) {
        requestLog = RequestLog(logger: logger, output: answers.requestLogOutput)
        metrics = answers.metrics
        logNotModified = answers.logNotModified
    }

    private func identity(status: HTTPResponse.Status, clientsID: String?) -> ResponseIdentity {
        ResponseIdentity(status: status, clientsID: clientsID, logNotModified: logNotModified, newID: { RequestID().description })
    }

    /// Adds `Date` and the request id to `headers`.
    mutating func stamp(_ headers: inout HTTPFields, status: HTTPResponse.Status, clientsID: String?) -> ResponseIdentity {
        let identity = identity(status: status, clientsID: clientsID)
        headers[.date] = date.now()
        if let requestID = identity.requestID { headers[.xRequestID] = requestID }
        return identity
    }

    /// Writes `Date`, the request id and the empty line that ends a head to `head`, in the
    /// order and spelling NIO's encoder gives the same fields.
    mutating func stamp(_ head: inout ByteBuffer, status: HTTPResponse.Status, clientsID: String?) -> ResponseIdentity {
        let identity = identity(status: status, clientsID: clientsID)
        head.writeString("Date: ")
        head.writeString(date.now())
        head.writeString("\r\n")
        if let requestID = identity.requestID {
            head.writeString("X-Request-Id: ")
            head.writeString(requestID)
            head.writeString("\r\n")
        }
        head.writeString("\r\n")
        return identity
    }

    /// Counts (an index answer) and logs an answer once it is written.
    func finished(
        _ identity: ResponseIdentity, route: Route, method: HTTPRequest.Method, path: String, status: HTTPResponse.Status,
        since start: ContinuousClock.Instant, bodyBytes: Int?
    ) {
        if route == .index { metrics.countFastPathIndexAnswer(status: status.code) }
        if identity.logged, let requestID = identity.requestID {
            requestLog.write(requestID: requestID, method: method, path: path, status: status, since: start, bytes: bodyBytes)
        }
    }
}
