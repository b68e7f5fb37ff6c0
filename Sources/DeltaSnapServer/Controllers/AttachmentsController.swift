import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// Attachments (docs/PROTOCOL.md §12): `GET|HEAD …/attachments/{hash}` serves a blob to
/// whoever may read a record of that collection or partition that refers to it; `PUT|POST`
/// uploads one — whole, or as the first part of a resumable upload whose later parts go to
/// `/v1/uploads/{token}` (draft-ietf-httpbis-resumable-upload).
///
/// ```swift
/// routes.addRoutes(attachments.routes(context: BasicRequestContext.self))
/// ```
struct AttachmentsController: GatedController {
    let gate: Gate
    let reviewRouting: ReviewRouting
    let store: any AttachmentStore
    /// `store` as a keeper of one file per blob (the embedded default), cast once: a cast to
    /// a protocol existential on every download was a measurable part of a small one's CPU.
    let attachmentFiles: (any AttachmentFiles)?
    /// Attachments served lately: references, and small blobs whole.
    let attachmentMemory: AttachmentMemory
    /// Resumable uploads a request is appending to now.
    let activeUploads: ActiveUploads
    let metrics: ServerMetrics
    let connectionMetrics: ConnectionMetrics
    let access: AccessPolicy
    /// The largest attachment accepted (`413` above; `Upload-Limit: max-size`).
    let maximumAttachmentBytes: UInt64
    /// Seconds an unfinished resumable upload is kept from its start.
    let uploadLifetime: Int64

    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.head("/v1/uploads/:token") { request, context in try await uploadProgress(request, context: context) }
        // The draft allows GET for the offset too (a body means nothing there).
        routes.get("/v1/uploads/:token") { request, context in try await uploadProgress(request, context: context) }
        routes.patch("/v1/uploads/:token") { request, context in try await appendToUpload(request, context: context) }
        routes.delete("/v1/uploads/:token") { request, context in try await cancelUpload(request, context: context) }
        for method in [HTTPRequest.Method.post, .put, .options, .trace] {
            routes.on("/v1/uploads/:token", method: method) { _, _ -> Response in throw APIError.methodNotAllowed("HEAD, GET, PATCH, DELETE") }
        }
        for base in CollectionRoutes.bases {
            routes.get(RouterPath(base + "/attachments/:hash")) { request, context in
                try await getAttachment(request, context: context, bodyless: false)
            }
            routes.head(RouterPath(base + "/attachments/:hash")) { request, context in
                try await getAttachment(request, context: context, bodyless: true)
            }
            routes.put(RouterPath(base + "/attachments/:hash")) { request, context in
                try await uploadAttachment(request, context: context)
            }
            routes.post(RouterPath(base + "/attachments/:hash")) { request, context in
                try await uploadAttachment(request, context: context)
            }
            routes.on(RouterPath(base + "/attachments/:hash"), method: .options) { request, _ in try attachmentOptions(request) }
            for method in [HTTPRequest.Method.delete, .patch, .trace] {
                routes.on(RouterPath(base + "/attachments/:hash"), method: method) { _, _ -> Response in
                    throw APIError.methodNotAllowed("GET, HEAD, PUT, POST, OPTIONS")
                }
            }
        }
        return routes
    }

    // MARK: - Download

    /// `GET|HEAD …/attachments/{hash}`: the bytes (`Range` → `206`), `ETag` = the hash.
    func getAttachment(_ request: Request, context: some RequestContext, bodyless: Bool) async throws -> Response {
        let path = try collectionPath(context)
        let hash = try context.parameters.require("hash")
        var isPublic = access.isPublicRead(path)
        if !isPublic { _ = try await authorize(request, path, for: .read) }
        let name = path.description
        var reference = attachmentMemory.reference(of: hash, in: name)
        if reference == nil {
            // One answer for a hash that is not held, one no record here refers to, and one
            // that is not a hash: nothing tells whether someone else stored those bytes.
            guard AttachmentReference.isSHA256(hash) else { throw APIError.unknownAttachment(hash, in: path) }
            if let found = try await store.attachment(hash, in: name) {
                attachmentMemory.remember(found, in: name)
                reference = found
            } else if let workspace = try await reviewRouting.previewedName(of: path, for: request), let found = try await store.attachment(hash, in: workspace) {
                // A preview device (§13.5) sees the workspace's files as its records: the
                // photo a change adds. Not remembered under `name` (others would be served it)
                // and never kept by a shared cache.
                reference = found
                isPublic = false
            } else {
                throw APIError.unknownAttachment(hash, in: path)
            }
        }
        let held = reference!
        var answer = try Self.attachmentAnswer(
            held, isPublic: isPublic, ifNoneMatch: request.headers[.ifNoneMatch], range: request.headers[.range], ifRange: request.headers[.ifRange])
        guard let served = answer.range, !bodyless else { return Response(status: answer.status, headers: answer.headers) }
        // A small blob is read whole (and, from a store without files, kept in memory).
        if held.size <= AttachmentMemory.smallBlobBytes {
            let whole = try await smallBlob(held)
            let body = whole.getSlice(at: whole.readerIndex + Int(served.lowerBound), length: served.count)!
            metrics.attachmentBytesSent.increment(by: body.readableBytes)
            answer.headers[.contentLength] = String(body.readableBytes)
            return Response(status: answer.status, headers: answer.headers, body: .init(byteBuffer: body))
        }
        let (store, metrics) = (self.store, self.metrics)
        // Whether the blob is still there, asked before the head is sent: once it is, a failed
        // read can only cut the connection — a client would see an empty reply, not a 404.
        let files = attachmentFiles
        let present = if let file = files?.attachmentFile(hash) { FileManager.default.isReadableFile(atPath: file) } else { try await store.attachmentSize(hash) != nil }
        guard present else {
            // Collected since the reference was remembered (a record stopped referring to it).
            attachmentMemory.forget(hash, in: name)
            throw APIError.unknownAttachment(hash, in: path)
        }
        if let files, let file = files.attachmentFile(hash) {
            // The file is open while the body is written: counted, so a download past the
            // gate is refused rather than take a descriptor the process needs.
            guard let slot = attachmentMemory.transfers.enter() else { throw APIError.overCapacity(metrics: connectionMetrics) }
            // Straight from the file into network buffers (NIO's thread pool), as nginx would.
            metrics.attachmentBytesSent.increment(by: served.count)
            let body = try await FileIO().loadFile(
                path: file, range: Int(served.lowerBound)...Int(served.upperBound - 1), context: context, chunkLength: Self.fileChunkBytes)
            return Response(status: answer.status, headers: answer.headers, body: ResponseBody(contentLength: served.count) { writer in
                try await body.write(writer)
                withExtendedLifetime(slot) {}
            })
        }
        return Response(status: answer.status, headers: answer.headers, body: ResponseBody(contentLength: served.count) { writer in
            try await store.readAttachment(hash, range: served) { chunk in
                try await writer.write(ByteBuffer(bytes: chunk))
                metrics.attachmentBytesSent.increment(by: chunk.count)
            }
            try await writer.finish(nil)
        })
    }

    /// The whole bytes of a small blob: from its file (a read — on the event loop when the fast
    /// path calls, as nginx reads a static file: a blob this small in the page cache is a memory
    /// copy), from memory, or read from the store (then kept in memory: the store has no file
    /// to read it from next time).
    private func smallBlob(_ reference: AttachmentReference) async throws -> ByteBuffer {
        if let files = attachmentFiles,
           let bytes = attachmentMemory.file(of: reference.sha256, size: reference.size, at: { files.attachmentFile(reference.sha256) })?.read(reference.size)
        {
            return bytes
        }
        if let kept = attachmentMemory.body(of: reference.sha256) { return kept }
        var buffer = ByteBuffer()
        buffer.reserveCapacity(Int(reference.size))
        try await store.readAttachment(reference.sha256, range: 0..<reference.size) { buffer.writeBytes($0) }
        attachmentMemory.keep(buffer, of: reference.sha256)
        return buffer
    }

    /// The bytes read from a file per write: large enough that a 100 MiB download is a hundred
    /// reads, small enough to stay cheap in memory per connection.
    static let fileChunkBytes = 1 << 20

    /// The status and headers of a download of `reference` (and the range of bytes its body
    /// carries; nil for a `304`), decided once for the router's path and the fast path.
    static func attachmentAnswer(
        _ reference: AttachmentReference, isPublic: Bool, ifNoneMatch: String?, range header: String?, ifRange: String?
    ) throws -> (status: HTTPResponse.Status, headers: HTTPFields, range: Range<UInt64>?) {
        let tag = "\"\(reference.sha256)\""
        var headers: HTTPFields = [
            .eTag: tag, .contentType: reference.type, .acceptRanges: "bytes", .cacheControl: CacheRule.immutable(isPublic: isPublic),
        ]
        if ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: nil).matches(entityTag: tag) { return (.notModified, headers, nil) }
        var range = ByteRangeRequest(header: header, size: reference.size)
        // A range of another representation than this one is no range of this one.
        if let ifRange, ifRange.trimmingSpaces != tag { range = .whole }
        switch range {
        case .whole:
            headers[.contentLength] = String(reference.size)
            return (.ok, headers, 0..<reference.size)
        case .partial(let part):
            headers[.contentRange] = "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(reference.size)"
            headers[.contentLength] = String(part.count)
            return (.partialContent, headers, part)
        case .unsatisfiable:
            throw APIError(
                .rangeNotSatisfiable, "range_not_satisfiable", "the attachment is \(reference.size) bytes; the range asked for lies past its end",
                headers: [.contentRange: "bytes */\(reference.size)"])
        }
    }

    // MARK: - Upload

    /// `PUT|POST …/attachments/{hash}`: the whole blob (its size from `Content-Length` or
    /// `Upload-Length`, its type from `Content-Type`), or with `Upload-Complete` the start of
    /// a resumable upload. Every byte is read and checked, whoever stored the same bytes
    /// before: no caller learns that they exist.
    func uploadAttachment(_ request: Request, context: some RequestContext) async throws -> Response {
        let path = try collectionPath(context)
        let principal = try await authorize(request, path, for: .write)
        let hash = try context.parameters.require("hash")
        guard AttachmentReference.isSHA256(hash) else {
            throw APIError(.badRequest, "invalid_attachment", "the hash in the path must be a SHA-256: 64 lowercase hex digits")
        }
        let fields = try ResumableUploadFields(request.headers)
        // The blob's size: Upload-Length, or the Content-Length of a request that carries it whole.
        let whole = fields.isCreation ? fields.complete == true : true
        guard let size = fields.length ?? (whole ? request.headers[.contentLength].flatMap({ UInt64($0.trimmingSpaces) }) : nil) else {
            throw APIError(.lengthRequired, "length_required", "state the attachment's size: send it whole with Content-Length, or state Upload-Length")
        }
        try requireWithinLimit(size)
        var type = request.headers[.contentType]?.trimmingSpaces ?? "application/octet-stream"
        if type.isEmpty || type == ResumableUploadFields.partialUploadType { type = "application/octet-stream" }
        let reference: AttachmentReference
        do {
            reference = try AttachmentReference(sha256: hash, size: size, type: type)
        } catch {
            throw APIError(.badRequest, "invalid_attachment", error.description)
        }
        guard let complete = fields.complete else {
            try await receive(request) { next in try await store.storeAttachment(reference, from: next) }
            try await store.noteAttachmentUpload(hash, into: path.description)
            metrics.attachmentsStored.increment()
            return Self.stored(reference, status: .created)
        }
        let now = Int64(Date().timeIntervalSince1970)
        // Unfinished uploads past their lifetime go as new ones begin: no sweeper to run.
        _ = try? await store.expireUploads(begunBefore: now - uploadLifetime)
        // The token the 104 announced; a fresh one behind a server without the announcing
        // responder (an app mounting the routes on its own).
        let token = InformationalResponder.announcedToken ?? AttachmentUpload.newToken()
        let upload = AttachmentUpload(token: token, reference: reference, collection: path.description, owner: principal.subject, createdAt: now)
        try await store.createUpload(upload)
        return try await append(request, to: upload, at: 0, complete: complete, version: fields.answerVersion, creating: true)
    }

    /// `HEAD /v1/uploads/{token}`: how many bytes the upload holds (`Upload-Offset`). An
    /// append still running on it — the request of a connection that was just cut, not yet
    /// noticed — is waited for first (briefly), so the offset is the one to go on from (the
    /// draft's "offset MUST be current").
    func uploadProgress(_ request: Request, context: some RequestContext) async throws -> Response {
        var upload = try await ownedUpload(request, context: context)
        let version = try ResumableUploadFields(request.headers).answerVersion
        if await activeUploads.waitUntilIdle(upload.token) { upload = try await store.upload(upload.token) ?? upload }
        return Response(status: .noContent, headers: progress(of: upload, received: upload.received, complete: false, version: version))
    }

    /// `PATCH /v1/uploads/{token}`: the next part, from `Upload-Offset`.
    func appendToUpload(_ request: Request, context: some RequestContext) async throws -> Response {
        let upload = try await ownedUpload(request, context: context)
        let fields = try ResumableUploadFields(request.headers)
        let version = fields.answerVersion
        guard let offset = fields.offset else { throw APIError(.badRequest, "invalid_upload_field", "an append needs Upload-Offset") }
        guard let complete = fields.complete else {
            throw APIError(.badRequest, "invalid_upload_field", "an append needs Upload-Complete (?1 for the last part, ?0 otherwise)")
        }
        if let length = fields.length, length != upload.reference.size {
            throw APIError(
                .badRequest, "inconsistent_upload_length", "Upload-Length is \(length), but the upload was begun as \(upload.reference.size) bytes")
        }
        guard offset == upload.received else { throw Self.offsetMismatch(upload, expected: upload.received, provided: offset, version: version) }
        return try await append(request, to: upload, at: offset, complete: complete, version: version, creating: false)
    }

    /// `DELETE /v1/uploads/{token}`: gives the upload up; its bytes go.
    func cancelUpload(_ request: Request, context: some RequestContext) async throws -> Response {
        let upload = try await ownedUpload(request, context: context)
        guard try await store.cancelUpload(upload.token) else { throw APIError.unknownUpload(upload.token) }
        return Response(status: .noContent, headers: [.cacheControl: "no-store"])
    }

    // MARK: - Proof of possession

    /// What a push by `principal` to `path` may name (docs/PROTOCOL.md §12.2): the blobs its
    /// values mention that the writer uploaded into `path`, or that a record it may read
    /// refers to. The store adds what `path`'s records already refer to. A hash the writer
    /// cannot prove is then refused as one no one stored (`missing_attachment`): knowing a
    /// hash — of another user's private file — never reads its bytes, and the one copy the
    /// store keeps serves every scope that proved it.
    func attachmentProof(for mutations: [ParsedMutation], writing path: CollectionPath, as principal: Principal) async throws -> AttachmentProof {
        // The data owner may read every record: whatever it names it could read anyway.
        if principal.isAdmin { return .unchecked }
        var mentioned = Set<String>()
        for parsed in mutations { if let value = parsed.mutation?.value { mentioned.formUnion(AttachmentRule.hashesMentioned(in: value)) } }
        var proven = Set<String>()
        for sha256 in mentioned where try await mayName(sha256, writing: path, as: principal) { proven.insert(sha256) }
        return .proven(proven)
    }

    /// Whether `principal` holds the bytes of `sha256`: uploaded into `path`, or referred to
    /// by a record of a collection or partition it may read (review bookkeeping excluded: it
    /// is read through the review endpoints only).
    private func mayName(_ sha256: String, writing path: CollectionPath, as principal: Principal) async throws -> Bool {
        if try await store.attachmentUploaded(sha256, into: path.description) { return true }
        // The scope's own records refer to it (a patch of a record with a photo): proven by the
        // store's push anyway, so the readable scopes are not looked through.
        if try await store.attachment(sha256, in: path.description) != nil { return true }
        for name in try await store.collections(referringTo: sha256, limit: Self.proofScopesChecked) where !ReviewPaths.isReserved(name) {
            guard let scope = CollectionPath(name) else { continue }
            if try await accessControl.mayRead(scope, as: principal, memberships: gate.memberships) { return true }
        }
        return false
    }

    /// How many of the collections referring to a blob a proof looks at: a file shared by
    /// thousands of private partitions is proven by uploading it (the writer holds it).
    static let proofScopesChecked = 1000

    // MARK: - Helpers

    /// Streams `request`'s content into the upload from `offset`, then answers: the stored
    /// reference once the last part is in and proven, else where the upload stands.
    private func append(
        _ request: Request, to upload: AttachmentUpload, at offset: UInt64, complete: Bool, version: Int, creating: Bool
    ) async throws -> Response {
        guard await activeUploads.begin(upload.token) else {
            // Another append still runs after the wait (a client sending two at once).
            var error = APIError(.conflict, "upload_busy", "another request is appending to this upload; ask HEAD for its offset shortly")
            error.headers[.retryAfter] = "1"
            throw error
        }
        defer { activeUploads.end(upload.token) }
        // An append that ran meanwhile moved the offset on.
        if !creating, let now = try await store.upload(upload.token), now.received != offset {
            throw Self.offsetMismatch(upload, expected: now.received, provided: offset, version: version)
        }
        let received: UInt64
        do {
            received = try await receive(request) { next in try await store.appendUpload(upload.token, at: offset, from: next) }
        } catch let error as StoreError where error.code == .uploadOffsetMismatch {
            let now = try await store.upload(upload.token)?.received ?? 0
            throw Self.offsetMismatch(upload, expected: now, provided: offset, version: version)
        }
        guard complete else {
            var headers = progress(of: upload, received: received, complete: false, version: version)
            // Versions up to 6 answered an append 201; later ones 204.
            guard creating else { return Response(status: version <= 6 ? .created : .noContent, headers: headers) }
            headers[.location] = "/v1/uploads/\(upload.token)"
            return Response(status: .created, headers: headers)
        }
        guard received == upload.reference.size else {
            _ = try? await store.cancelUpload(upload.token)
            throw APIError(
                .badRequest, "attachment_mismatch",
                "the upload was marked complete at \(received) bytes, but the attachment \(upload.reference.sha256) is \(upload.reference.size); nothing was kept")
        }
        try await store.completeUpload(upload.token)
        try await store.noteAttachmentUpload(upload.reference.sha256, into: upload.collection)
        metrics.attachmentsStored.increment()
        var response = Self.stored(upload.reference, status: creating ? .created : .ok)
        // Set, not appended: both carry Cache-Control.
        for field in progress(of: upload, received: received, complete: true, version: version) { response.headers[field.name] = field.value }
        return response
    }

    /// Hands `request`'s content to `body` a buffer at a time, counted. A body that stops
    /// early is the client's cut: `400`, and the store keeps what arrived.
    private func receive<T>(_ request: Request, _ body: (() async throws -> [UInt8]?) async throws -> T) async throws -> T {
        metrics.uploadsInProgress.increment()
        defer { metrics.uploadsInProgress.decrement() }
        var iterator = request.body.makeAsyncIterator()
        let metrics = self.metrics
        return try await body {
            let buffer: ByteBuffer?
            do {
                buffer = try await iterator.next()
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                throw APIError(.badRequest, "unreadable_body", "the upload's content stopped before its end: \(error)")
            }
            guard let buffer else { return nil }
            metrics.attachmentBytesReceived.increment(by: buffer.readableBytes)
            return Array(buffer.readableBytesView)
        }
    }

    /// The upload `{token}` names, once the caller may go on with it: its owner (or the
    /// admin), who may still write where it goes. Anyone else gets the `404` of an upload
    /// that does not exist.
    private func ownedUpload(_ request: Request, context: some RequestContext) async throws -> AttachmentUpload {
        let token = try context.parameters.require("token")
        guard AttachmentUpload.isToken(token), let upload = try await store.upload(token), let path = CollectionPath(upload.collection) else {
            throw APIError.unknownUpload(token)
        }
        let principal: Principal
        do {
            principal = try await authorize(request, path, for: .write)
        } catch let error as APIError where error.status == .unauthorized {
            throw error
        } catch is APIError {
            throw APIError.unknownUpload(token)
        }
        guard principal.isAdmin || principal.subject == upload.owner else { throw APIError.unknownUpload(token) }
        return upload
    }

    private func requireWithinLimit(_ size: UInt64) throws {
        let limit = maximumAttachmentBytes
        guard size > limit else { return }
        throw APIError(
            .contentTooLarge, "attachment_too_large", "the attachment is \(size) bytes; this server keeps attachments of at most \(limit)",
            headers: [ResumableUploadFields.limitField: uploadLimits.field(version: ResumableUploadFields.latestInteropVersion)])
    }

    private func progress(of upload: AttachmentUpload, received: UInt64, complete: Bool, version: Int) -> HTTPFields {
        ResumableUploadFields.progress(version: version, offset: received, complete: complete, length: upload.reference.size, limit: uploadLimits.field(version: version))
    }

    /// `Upload-Limit` in `version`'s spelling.
    var uploadLimits: UploadLimits { UploadLimits(maximumSize: maximumAttachmentBytes, lifetime: uploadLifetime) }

    /// `OPTIONS …/attachments/{hash}`: the methods and the limits (the draft's discovery).
    func attachmentOptions(_ request: Request) throws -> Response {
        let version = try ResumableUploadFields(request.headers).answerVersion
        return Response(status: .noContent, headers: [.allow: "GET, HEAD, PUT, POST, OPTIONS", ResumableUploadFields.limitField: uploadLimits.field(version: version)])
    }

    /// The answer to a finished upload: the reference to put in a record.
    static func stored(_ reference: AttachmentReference, status: HTTPResponse.Status) -> Response {
        var body = Array(reference.description.utf8)
        body.append(UInt8(ascii: "\n"))
        return Response(
            status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    /// `409` with the offset the upload holds, as the draft's problem type says.
    static func offsetMismatch(_ upload: AttachmentUpload, expected: UInt64, provided: UInt64, version: Int) -> APIError {
        var error = APIError(
            .conflict, "upload_offset_mismatch", "upload \(upload.token) holds \(expected) bytes; the part sent begins at \(provided)")
        error.problemType = "https://iana.org/assignments/http-problem-types#mismatching-upload-offset"
        error.problemMembers = [JSONMember("expected-offset", .number(String(expected))), JSONMember("provided-offset", .number(String(provided)))]
        error.headers[ResumableUploadFields.offsetField] = String(expected)
        error.headers[ResumableUploadFields.completeness(version: version)] = ResumableUploadFields.completeValue(false, version: version)
        error.headers[ResumableUploadFields.interopVersionField] = String(version)
        return error
    }
}

extension APIError {
    static func unknownAttachment(_ hash: String, in path: CollectionPath) -> APIError {
        APIError(.notFound, "unknown_attachment", "no record of \"\(path)\" refers to an attachment \(hash) this server holds")
    }

    static func unknownUpload(_ token: String) -> APIError {
        APIError(.notFound, "unknown_upload", "upload \(token) does not exist (finished, cancelled, expired, or not yours); begin it again")
    }
}

/// The uploads a request of this process is appending to now: one at a time each, so an
/// interrupted part's request (still reading from a dead connection) and its retry never
/// write at once. Across instances the store's conditional checkpoint keeps them apart.
final class ActiveUploads: Sendable {
    private let tokens = NIOLockedValueBox<Set<String>>([])
    /// How long a request waits for another append of the same upload: an interrupted one
    /// ends within milliseconds of its connection's cut, seconds on a loaded machine, and a
    /// resumed part sent at a stale offset is sent again whole.
    static let patience: Duration = .seconds(10)

    /// Marks `token` as being appended to, waiting up to ``patience`` for an append already
    /// running; false when it still runs then.
    func begin(_ token: String) async -> Bool {
        let deadline = ContinuousClock.now + Self.patience
        while true {
            if tokens.withLockedValue({ $0.insert(token).inserted }) { return true }
            guard ContinuousClock.now < deadline, (try? await Task.sleep(for: .milliseconds(10))) != nil else { return false }
        }
    }

    func end(_ token: String) {
        tokens.withLockedValue { _ = $0.remove(token) }
    }

    /// Waits (up to ``patience``) until no append of `token` runs; true when one was running.
    func waitUntilIdle(_ token: String) async -> Bool {
        let deadline = ContinuousClock.now + Self.patience
        var waited = false
        while tokens.withLockedValue({ $0.contains(token) }), ContinuousClock.now < deadline {
            waited = true
            guard (try? await Task.sleep(for: .milliseconds(10))) != nil else { break }
        }
        return waited
    }
}
