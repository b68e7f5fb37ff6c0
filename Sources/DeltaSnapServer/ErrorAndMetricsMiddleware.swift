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
            RequestLog.write(
                to: context.logger, requestID: requestID, method: request.method, path: request.uri.path,
                status: response.status, since: start, bytes: response.body.contentLength)
        }
        return response
    }
}

/// The one line each answer logs at `info`: the router's answers and the fast path's alike.
enum RequestLog {
    static func write(
        to logger: Logger, requestID: String, method: HTTPRequest.Method, path: String,
        status: HTTPResponse.Status, since start: ContinuousClock.Instant, bytes: Int?
    ) {
        logger.info("request", metadata: [
            "request_id": .string(requestID),
            "method": .string(method.rawValue),
            "path": .string(path),
            "status": .stringConvertible(status.code),
            "duration_ms": .string(milliseconds(ContinuousClock.now - start)),
            "bytes": bytes.map { .stringConvertible($0) } ?? "streamed",
        ])
    }

    private static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let micros = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        return "\(micros / 1000).\(String(micros % 1000 + 1000).dropFirst())"
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
    public static let xRequestID = HTTPField.Name("X-Request-Id")!
}
