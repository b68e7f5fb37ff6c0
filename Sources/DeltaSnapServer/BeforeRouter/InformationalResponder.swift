import DeltaSnapStore
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import Foundation

/// The informational (`1xx`) answers a route cannot send, sent by the responder around the
/// router before the route reads a byte of the request's content:
///
/// - `100 Continue` to a request with `Expect: 100-continue` (curl sends it with every large
///   upload, and waits a second for it otherwise);
/// - `104 Upload Resumption Supported` with `Location: /v1/uploads/{token}` to a request that
///   begins a resumable upload of an attachment: a client whose first request is cut resumes
///   there instead of starting over.
///
/// ```swift
/// HTTP1Channel(responder: InformationalResponder.wrapping(responder, limits: attachments.uploadLimits, logger: logger))
/// ```
enum InformationalResponder {
    /// The token the `104` announced, for the route that creates the upload. A task-local,
    /// not a request field: the route runs in the responder's task, and a value there is one
    /// a client cannot send (a field would have to be stripped from every request).
    @TaskLocal static var announcedToken: String?

    /// `responder`, with the informational answers first.
    static func wrapping(
        _ responder: @escaping HTTPChannelHandler.Responder, limits: UploadLimits, logger: Logger
    ) -> HTTPChannelHandler.Responder {
        @Sendable func respond(_ request: Request, _ writer: consuming ResponseWriter, _ channel: any Channel) async throws {
            do {
                try await responder(request, writer, channel)
            } catch {
                logFailure(error, answering: request, logger: logger)
                throw error
            }
        }
        return { request, writer, channel in
            if let expect = request.headers[.expect], expect.lowercased().trimmingSpaces == "100-continue" {
                try await writer.writeInformationalHead(HTTPResponse(status: .continue))
            }
            // Only to a client that named a version this server speaks (the draft's rule).
            guard beginsUpload(request), let fields = try? ResumableUploadFields(request.headers), fields.isCreation,
                  let version = fields.interopVersion
            else { return try await respond(request, writer, channel) }
            let token = AttachmentUpload.newToken()
            var informational = HTTPFields()
            informational[.location] = "/v1/uploads/\(token)"
            informational[ResumableUploadFields.interopVersionField] = String(version)
            informational[ResumableUploadFields.limitField] = limits.field(version: version)
            try await writer.writeInformationalHead(HTTPResponse(status: ResumableUploadFields.resumptionSupported, headerFields: informational))
            // The writer cannot be captured and consumed by a closure: it goes in by `take()`.
            var handed: ResponseWriter? = consume writer
            try await $announcedToken.withValue(token) { try await respond(request, handed.take()!, channel) }
        }
    }

    /// An error out of the responder closes the connection with whatever of the answer was
    /// not yet sent — for a client, an empty or cut reply. A client that went away is
    /// routine (debug); anything else is the server's failure, said with the request.
    private static func logFailure(_ error: any Error, answering request: Request, logger: Logger) {
        let clientLeft: Bool = switch error {
        case ChannelError.ioOnClosedChannel, ChannelError.outputClosed, ChannelError.alreadyClosed, ChannelError.eof: true
        case let error as IOError: [EPIPE, ECONNRESET].contains(error.errnoCode)
        default: false
        }
        logger.log(
            level: clientLeft ? .debug : .error, "answering \(request.method) \(request.uri.path) failed; the connection is closed",
            metadata: ["error": "\(String(reflecting: error))"])
    }

    /// `PUT` or `POST` of `…/attachments/{hash}` with the draft's interop version and `Upload-Complete`.
    private static func beginsUpload(_ request: Request) -> Bool {
        guard request.method == .put || request.method == .post, request.headers[ResumableUploadFields.interopVersionField] != nil,
              request.headers[ResumableUploadFields.completeField] != nil || request.headers[ResumableUploadFields.incompleteField] != nil
        else { return false }
        if case .attachment = RequestTarget(path: request.uri.path) { return true }
        return false
    }
}
