import HTTPTypes

/// The fields of draft-ietf-httpbis-resumable-upload that a request carries, parsed, and
/// the ones each answer sends, for every interop version DeltaSnap speaks: 3 (draft -01,
/// iOS 17: `Upload-Incomplete`), 5 and 6 (drafts -03 to -05, iOS 18), 7 to 9 (drafts -06 to
/// -12). Hand-written rather than NIOResumableUpload's: see docs/ARCHITECTURE.md,
/// "Resumable uploads".
///
/// Any request with `Upload-Complete` (or `Upload-Incomplete`) begins a resumable upload,
/// as the draft says; the interop version only decides whether a `104` is sent (only for a
/// version this server speaks) and how the answers spell their fields.
///
/// ```swift
/// let fields = try ResumableUploadFields(request.headers)
/// if fields.isCreation { … }   // Upload-Complete (or, in version 3, Upload-Incomplete) was sent
/// ```
package struct ResumableUploadFields: Sendable, Equatable {
    /// `Upload-Draft-Interop-Version`, when it names a version this server speaks.
    package var interopVersion: Int?
    /// Whether this request's content ends the upload: `Upload-Complete: ?1`, or in
    /// version 3 `Upload-Incomplete: ?0`. Nil when neither field was sent.
    package var complete: Bool?
    /// `Upload-Offset`: where this request's content begins.
    package var offset: UInt64?
    /// `Upload-Length`: the whole upload's length, when the client states it.
    package var length: UInt64?

    /// The versions spoken.
    package static let interopVersions: ClosedRange<Int> = 3...9
    /// The spelling of answers to a client that named no version this server speaks.
    package static let latestInteropVersion = interopVersions.upperBound

    package static let interopVersionField = HTTPField.Name("Upload-Draft-Interop-Version")!
    package static let completeField = HTTPField.Name("Upload-Complete")!
    package static let incompleteField = HTTPField.Name("Upload-Incomplete")!
    package static let offsetField = HTTPField.Name("Upload-Offset")!
    package static let lengthField = HTTPField.Name("Upload-Length")!
    package static let limitField = HTTPField.Name("Upload-Limit")!
    /// The media type of an append's content from version 6 on.
    package static let partialUploadType = "application/partial-upload"
    /// 104 (Upload Resumption Supported).
    package static let resumptionSupported = HTTPResponse.Status(code: 104, reasonPhrase: "Upload Resumption Supported")

    /// Parses the fields; a malformed one is a `400` naming it.
    package init(_ fields: HTTPFields) throws(APIError) {
        if let text = fields[Self.interopVersionField], let version = Int(text.trimmingSpaces), Self.interopVersions.contains(version) {
            interopVersion = version
        }
        if let text = fields[Self.completeField] {
            complete = try Self.boolean(text, field: "Upload-Complete")
        } else if let text = fields[Self.incompleteField] {
            complete = !(try Self.boolean(text, field: "Upload-Incomplete"))
        }
        offset = try fields[Self.offsetField].map { text throws(APIError) in try Self.integer(text, field: "Upload-Offset") }
        length = try fields[Self.lengthField].map { text throws(APIError) in try Self.integer(text, field: "Upload-Length") }
    }

    /// A resumable upload begins (or goes on): `Upload-Complete` or `Upload-Incomplete` was sent.
    package var isCreation: Bool { complete != nil }

    /// The version answers are spelled in.
    package var answerVersion: Int { interopVersion ?? Self.latestInteropVersion }


    /// Where an upload stands, in the fields of `version`: `Upload-Offset`, whether it is
    /// complete, its length and the limits.
    package static func progress(version: Int, offset: UInt64, complete: Bool, length: UInt64?, limit: String) -> HTTPFields {
        var fields = HTTPFields()
        fields[interopVersionField] = String(version)
        fields[offsetField] = String(offset)
        fields[completeness(version: version)] = completeValue(complete, version: version)
        if let length { fields[lengthField] = String(length) }
        fields[limitField] = limit
        fields[.cacheControl] = "no-store"
        return fields
    }

    /// `Upload-Complete`, or in version 3 `Upload-Incomplete`.
    package static func completeness(version: Int) -> HTTPField.Name {
        version <= 3 ? incompleteField : completeField
    }

    /// The value of ``completeness(version:)`` saying `complete`.
    package static func completeValue(_ complete: Bool, version: Int) -> String {
        (complete != (version <= 3)) ? "?1" : "?0"
    }

    /// An RFC 8941 boolean: `?1` or `?0`.
    private static func boolean(_ text: String, field: String) throws(APIError) -> Bool {
        switch text.trimmingSpaces {
        case "?1": return true
        case "?0": return false
        default: throw APIError(.badRequest, "invalid_upload_field", "\(field) must be ?1 or ?0, not \"\(text)\"")
        }
    }

    /// An RFC 8941 non-negative integer (at most 15 digits).
    private static func integer(_ text: String, field: String) throws(APIError) -> UInt64 {
        let trimmed = text.trimmingSpaces
        guard !trimmed.isEmpty, trimmed.utf8.count <= 15, trimmed.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let value = UInt64(trimmed) else {
            throw APIError(.badRequest, "invalid_upload_field", "\(field) must be a whole number of bytes, not \"\(text)\"")
        }
        return value
    }
}

/// A server's upload limits — the largest attachment and the seconds an unfinished upload is
/// kept — held by the attachments controller and the responder that announces uploads.
package struct UploadLimits: Sendable {
    package var maximumSize: UInt64
    package var lifetime: Int64

    /// The `Upload-Limit` field in `version`'s spelling (`expires` became `max-age` in version 7).
    package func field(version: Int) -> String {
        "max-size=\(maximumSize), \(version <= 6 ? "expires" : "max-age")=\(lifetime)"
    }
}
