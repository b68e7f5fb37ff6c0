import Foundation
import Hummingbird

/// An error answered to a client as `{"error": code, "message": text}` with a 4xx/5xx status.
///
/// ```swift
/// throw APIError(.notFound, "unknown_collection", "collection \"x\" does not exist")
/// ```
public struct APIError: Error, HTTPResponseError, Sendable {
    public var status: HTTPResponse.Status
    /// A stable, machine-readable code.
    public var code: String
    /// A sentence a human can act on.
    public var message: String
    public var headers: HTTPFields

    public init(_ status: HTTPResponse.Status, _ code: String, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        Self.jsonResponse(status: status, headers: headers, code: code, message: message)
    }

    static func jsonResponse(status: HTTPResponse.Status, headers: HTTPFields = [:], code: String, message: String) -> Response {
        let object = ["error": code, "message": message]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        var headers = headers
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data + Data("\n".utf8))))
    }

    static func badCollectionName(_ name: String) -> APIError {
        APIError(.badRequest, "bad_collection_name", "invalid collection name \"\(name)\": use 1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")
    }

    static func unknownCollection(_ name: String) -> APIError {
        APIError(.notFound, "unknown_collection", "collection \"\(name)\" does not exist")
    }

    static func methodNotAllowed(_ allowed: String) -> APIError {
        APIError(.methodNotAllowed, "method_not_allowed", "this resource allows \(allowed) only", headers: [.allow: allowed])
    }
}

/// Turns every error into a JSON error body, so a client never sees an empty or HTML error,
/// and counts every response for `/metrics`.
struct ErrorAndMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response: Response
        do {
            response = try await next(request, context)
        } catch let error as APIError {
            response = try error.response(from: request, context: context)
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
        return response
    }
}
