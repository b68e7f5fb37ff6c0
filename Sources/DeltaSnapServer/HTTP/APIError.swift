import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird

/// An error answered to a client as `{"error": code, "message": text}` with a 4xx/5xx status.
///
/// ```swift
/// throw APIError(.notFound, "unknown_collection", "collection \"x\" does not exist")
/// ```
package struct APIError: Error, HTTPResponseError, Sendable {
    package var status: HTTPResponse.Status
    /// A stable, machine-readable code.
    package var code: String
    /// A sentence a human can act on.
    package var message: String
    package var headers: HTTPFields
    /// An RFC 9457 problem type a standard names for this error (the resumable-upload
    /// draft's offset mismatch): the body is then `application/problem+json` with `type`
    /// and ``problemMembers`` besides `error` and `message`.
    package var problemType: String?
    package var problemMembers: [JSONMember] = []

    package init(_ status: HTTPResponse.Status, _ code: String, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        guard let problemType else { return Self.jsonResponse(status: status, headers: headers, code: code, message: message) }
        var headers = headers
        headers[.contentType] = "application/problem+json"
        headers[.cacheControl] = "no-store"
        var members = [
            JSONMember("error", .string(code)), JSONMember("message", .string(message)), JSONMember("title", .string(message)),
            JSONMember("type", .string(problemType)),
        ] + problemMembers
        members.sort { $0.key.utf8Precedes($1.key) }
        var body = CanonicalJSON.bytes(.object(members))
        body.append(UInt8(ascii: "\n"))
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func jsonResponse(status: HTTPResponse.Status, headers: HTTPFields = [:], code: String, message: String) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        // Errors are never cacheable: a shared cache must not keep a 404 for a token that
        // exists a moment later, or a 503 from a restart.
        if headers[.cacheControl] == nil { headers[.cacheControl] = "no-store" }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: jsonBody(code: code, message: message))))
    }

    /// `{"error":…,"message":…}` and a newline.
    static func jsonBody(code: String, message: String) -> [UInt8] {
        var out: [UInt8] = []
        CanonicalJSON.write(.object([JSONMember("error", .string(code)), JSONMember("message", .string(message))]), into: &out)
        out.append(UInt8(ascii: "\n"))
        return out
    }

    /// The one answer for each store failure: a missing collection is `404`, a database out
    /// of reach (restarting, shutting down, every connection busy) `503` with `Retry-After`
    /// — never a `500` for what retrying mends.
    init(_ error: StoreError) {
        switch error.code {
        case .unknownCollection:
            self.init(.notFound, "unknown_collection", error.message)
        case .duplicateID:
            self.init(.badRequest, "invalid_record", error.message)
        case .unavailable, .busy:
            self.init(.serviceUnavailable, "database_unavailable", "\(error); retry shortly", headers: [.retryAfter: "1"])
        case .readOnly:
            self.init(.forbidden, "read_only_store", error.message)
        case .attachmentMismatch:
            self.init(.badRequest, "attachment_mismatch", error.message)
        case .missingAttachment:
            self.init(.conflict, "missing_attachment", error.message)
        case .invalidAttachmentReference:
            self.init(.badRequest, "invalid_attachment", error.message)
        default:
            // A code added later is a server fault until it is given an answer of its own.
            self.init(.internalServerError, "internal_error", "the server failed to answer: \(error)")
        }
    }

    /// A bad line of a write: `invalid_record`, or the store rule it broke
    /// (`missing_attachment`, …), with the line when the write had several.
    init(_ error: ImportError, batch: Bool) {
        let message = batch ? "line \(error.line): \(error.reason)" : error.reason
        if let code = error.code {
            self.init(StoreError(code, message))
        } else {
            self.init(.badRequest, "invalid_record", message)
        }
    }

    /// `503` with `Retry-After`: the server has no descriptor to spare for this request now
    /// (counted as shed for a `transfer`).
    static func overCapacity(metrics: ConnectionMetrics) -> APIError {
        metrics.shedTransfer.increment()
        return APIError(
            .serviceUnavailable, "over_capacity", "the server is serving as many file downloads as it may at once; retry shortly",
            headers: [.retryAfter: "1"])
    }

    static func badCollectionName(_ name: String) -> APIError {
        APIError(.badRequest, "bad_collection_name", InvalidCollectionName(name: name).description)
    }

    static func unknownCollection(_ name: String) -> APIError {
        APIError(.notFound, "unknown_collection", "collection \"\(name)\" does not exist")
    }

    static func methodNotAllowed(_ allowed: String) -> APIError {
        APIError(.methodNotAllowed, "method_not_allowed", "this resource allows \(allowed) only", headers: [.allow: allowed])
    }
}
