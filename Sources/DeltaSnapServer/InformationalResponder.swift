import DeltaSnapStore
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

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
/// HTTP1Channel(responder: InformationalResponder.wrapping(responder, limit: { api.uploadLimit(version: $0) }))
/// ```
enum InformationalResponder {
    /// The field that hands the announced token to the route (a client's own is dropped).
    static let tokenField = HTTPField.Name("DeltaSnap-Announced-Upload")!

    /// `responder`, with the informational answers first.
    static func wrapping(
        _ responder: @escaping HTTPChannelHandler.Responder, limit: @escaping @Sendable (Int) -> String
    ) -> HTTPChannelHandler.Responder {
        { request, writer, channel in
            if let expect = request.headers[.expect], expect.lowercased().trimmingSpaces == "100-continue" {
                try await writer.writeInformationalHead(HTTPResponse(status: .continue))
            }
            guard request.headers[tokenField] != nil || beginsUpload(request) else {
                return try await responder(request, writer, channel)
            }
            var head = request.head
            head.headerFields[tokenField] = nil
            // Only to a client that named a version this server speaks (the draft's rule).
            if let fields = try? ResumableUploadFields(request.headers), fields.isCreation, let version = fields.interopVersion, beginsUpload(request) {
                let token = AttachmentUpload.newToken()
                var informational = HTTPFields()
                informational[.location] = "/v1/uploads/\(token)"
                informational[ResumableUploadFields.interopVersionField] = String(version)
                informational[ResumableUploadFields.limitField] = limit(version)
                try await writer.writeInformationalHead(HTTPResponse(status: ResumableUploadFields.resumptionSupported, headerFields: informational))
                head.headerFields[tokenField] = token
            }
            try await responder(Request(head: head, body: request.body), writer, channel)
        }
    }

    /// The token the `104` announced for `request`, if one was sent.
    static func announcedToken(_ request: Request) -> String? {
        request.headers[tokenField].flatMap { AttachmentUpload.isToken($0) ? $0 : nil }
    }

    /// `PUT` or `POST` of `…/attachments/{hash}` with the draft's interop version and `Upload-Complete`.
    private static func beginsUpload(_ request: Request) -> Bool {
        guard request.method == .put || request.method == .post, request.headers[ResumableUploadFields.interopVersionField] != nil,
              request.headers[ResumableUploadFields.completeField] != nil || request.headers[ResumableUploadFields.incompleteField] != nil
        else { return false }
        let path = request.uri.path
        return path.hasPrefix("/v1/collections/") && path.contains("/attachments/")
    }
}
