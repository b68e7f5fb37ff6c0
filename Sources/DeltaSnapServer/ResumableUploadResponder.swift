import DeltaSnapStore
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

/// Sends the `104 Upload Resumption Supported` that tells a client where a resumable upload
/// it begins goes on (`Location: /v1/uploads/{token}`), before the route reads a byte of it:
/// a client whose first request is cut then resumes instead of starting over. A route cannot
/// send an informational response; the responder around the router can.
///
/// ```swift
/// HTTP1Channel(responder: ResumableUploadResponder.announcingUploads(responder))
/// ```
enum ResumableUploadResponder {
    /// The field that hands the announced token to the route (a client's own is dropped).
    static let tokenField = HTTPField.Name("DeltaSnap-Announced-Upload")!

    /// `responder`, with a `104` first for every request that begins a resumable upload of
    /// an attachment.
    static func announcingUploads(
        _ responder: @escaping HTTPChannelHandler.Responder, limit: @escaping @Sendable (Int) -> String
    ) -> HTTPChannelHandler.Responder {
        { request, writer, channel in
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
