import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Turns every error into a JSON error body, so a client never sees an empty or HTML error;
/// counts every response for `/metrics`; tags it with a request id (`X-Request-Id`) and logs
/// one line for it at `info` — except an unlogged 304 (see ``DeltaSnapServerConfiguration/logNotModified``),
/// which carries only the id the client sent, if any.
struct ErrorAndMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics
    /// Whether 304s are logged too: they are most of the traffic and carry no news.
    let logNotModified: Bool
    /// Where request lines go besides the request's logger (see ``RequestLog``).
    let requestLogOutput: BufferedLogOutput?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as APIError {
            response = try error.response(from: request, context: context)
        } catch let error as StoreError {
            let answer = APIError(error)
            if answer.status == .internalServerError {
                context.logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
            }
            response = try answer.response(from: request, context: context)
        } catch let error as HTTPError {
            // Hummingbird's own errors: an unmatched route, a body over the limit, …
            let code = switch error.status {
            case .notFound: "not_found"
            case .contentTooLarge: "body_too_large"
            case .methodNotAllowed: "method_not_allowed"
            default: "http_\(error.status.code)"
            }
            let message = error.body ?? (error.status == .notFound ? "no such resource: \(request.uri.path)" : error.status.reasonPhrase)
            response = APIError.jsonResponse(status: error.status, headers: error.headers, code: code, message: message)
        } catch {
            context.logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
            response = APIError.jsonResponse(status: .internalServerError, code: "internal_error", message: "the server failed to answer: \(error)")
        }
        metrics.countResponse(route: context.endpointPath ?? "unmatched", status: response.status.code)
        let identity = ResponseIdentity(
            status: response.status, clientsID: request.headers[.xRequestID], logNotModified: logNotModified, newID: { context.id })
        // The 304 hot path: its headers are shared, ready-made fields, and adding one copies
        // them (a 15 % lower 304 rate when measured), so an unlogged 304 gets no new id.
        if let requestID = identity.requestID { response.headers[.xRequestID] = requestID }
        if identity.logged, let requestID = identity.requestID {
            RequestLog(logger: context.logger, output: requestLogOutput).write(
                requestID: requestID, method: request.method, path: request.uri.path,
                status: response.status, since: start, bytes: response.body.contentLength)
        }
        return response
    }
}

/// The one line each answer logs at `info` — the router's answers and the fast paths' alike:
/// `request` with `bytes`, `duration_ms`, `method`, `path`, `request_id` and `status`.
///
/// With a ``BufferedLogOutput`` (what `deltasnap serve` sets) the line is formatted straight
/// into its buffer — the bytes `BufferedLogHandler` would write for the same call, without
/// the metadata dictionary, its sorting and its strings, which were most of a logged delta's
/// extra cost; otherwise it goes through `logger` (any swift-log handler).
struct RequestLog: Sendable {
    let logger: Logger
    let output: BufferedLogOutput?

    func write(
        requestID: String, method: HTTPRequest.Method, path: String, status: HTTPResponse.Status,
        since start: ContinuousClock.Instant, bytes: Int?
    ) {
        guard logger.logLevel <= .info else { return }
        let elapsed = ContinuousClock.now - start
        if let output {
            output.appendRequest(
                label: logger.label, bytes: bytes, microseconds: Self.microseconds(elapsed), method: method.rawValue, path: path,
                requestID: requestID, status: status.code)
            return
        }
        let duration = Self.milliseconds(elapsed)
        logger.info("request", metadata: [
            "request_id": .string(requestID),
            "method": .string(method.rawValue),
            "path": .string(path),
            "status": .stringConvertible(status.code),
            "duration_ms": .string(duration),
            "bytes": bytes.map { .stringConvertible($0) } ?? "streamed",
        ])
    }

    static func milliseconds(_ duration: Duration) -> String {
        let micros = microseconds(duration)
        return "\(micros / 1000).\(String(micros % 1000 + 1000).dropFirst())"
    }

    static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    }
}

/// The request id a client may send in `X-Request-Id` to find its request in the server's
/// logs; anything else gets Hummingbird's own id for the request.
enum RequestIdentifier {
    /// A client's id when it is safe to echo and log: 1 to 128 characters of letters, digits
    /// and `-_.:` (no spaces, quotes or control characters to forge a log line with).
    static func echoed(_ value: String?) -> String? {
        guard let value, (1...128).contains(value.utf8.count) else { return nil }
        let allowed = value.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"): true
            default: false
            }
        }
        return allowed ? value : nil
    }
}

extension HTTPField.Name {
    /// Echoed (or assigned) on every response, and logged with the request.
    package static let xRequestID = HTTPField.Name("X-Request-Id")!
}
