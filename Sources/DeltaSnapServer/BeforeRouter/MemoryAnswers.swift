import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird

/// An answer the server can give from memory alone, before the request reaches the router.
enum FastAnswer {
    /// `304 Not Modified` for this head: its ``ServedHead/validatorHeaders``.
    case notModified(ServedHead)
    /// `200` with a cached delta.
    case delta(PollAnswer)

    /// The body's length, for the log line.
    var bodyBytes: Int? {
        if case .delta(let cached) = self { return cached.body.readableBytes }
        return nil
    }
}

/// The answers the server gives from memory before a request reaches the router — a poll's
/// `304` or cached delta, a small public download, the index's `304` and held waits — with the
/// router's status, headers and counts. The one thing ``RawPollHandler`` and
/// ``FastPathHandler`` hold: only what these answers read, never the whole API.
///
/// ```swift
/// let answers = MemoryAnswers(…)
/// if let answer = answers.fastAnswer(to: request, start: .now) { … }   // else: the router
/// ```
final class MemoryAnswers: Sendable {
    let metrics: ServerMetrics
    /// Read once: the configuration is a large value, and these are read per answer.
    let logNotModified: Bool
    let requestLogOutput: BufferedLogOutput?
    let accessControl: AccessControl
    let heads: HeadCache
    let deltas: DeltaCache
    /// Reviewed collections: never answered here (a preview device's token must be looked at).
    let reviewed: [String: ReviewSettings]
    let attachmentMemory: AttachmentMemory
    let attachmentFiles: (any AttachmentFiles)?
    /// The index's answers from memory, and its held waits.
    let index: IndexController

    init(
        configuration: DeltaSnapServerConfiguration, metrics: ServerMetrics, accessControl: AccessControl, heads: HeadCache, deltas: DeltaCache,
        attachmentMemory: AttachmentMemory, attachmentFiles: (any AttachmentFiles)?, index: IndexController
    ) {
        self.metrics = metrics
        logNotModified = configuration.logNotModified
        requestLogOutput = configuration.requestLogOutput
        reviewed = configuration.access.rules.reviewed
        self.accessControl = accessControl
        self.heads = heads
        self.deltas = deltas
        self.attachmentMemory = attachmentMemory
        self.attachmentFiles = attachmentFiles
        self.index = index
    }

    /// What a download answered before the router carries.
    enum AttachmentBody {
        /// None (`HEAD`, `304`).
        case none
        case bytes(ByteBuffer)
        /// These bytes of the store's own file, open, for `sendfile` (``RawPollHandler``).
        case file(BlobFile, range: Range<UInt64>)
    }

    /// The plainest download — `GET` of a whole blob of a public collection, no validator —
    /// from raw bytes: the head encoded once per blob, the body the store's file (`sendfile`).
    /// Nil when it is not that plain (``attachmentFromMemory(collection:sha256:ifNoneMatch:range:ifRange:sendsBody:allowsFile:)``
    /// answers then, or the router).
    func plainDownload(collection name: String, sha256 hash: String) -> (head: ByteBuffer, file: BlobFile, size: UInt64)? {
        guard let files = attachmentFiles, CollectionName.isValid(name), let collection = CollectionPath(name: name, key: nil),
              accessControl.policy.isPublicRead(collection),
              let (reference, head) = attachmentMemory.publicHead(of: hash, in: name, encode: Self.encodedPublicHead),
              let file = attachmentMemory.file(of: hash, size: reference.size, at: { files.attachmentFile(hash) })
        else { return nil }
        countDownload(bytes: reference.size)
        return (head, file, reference.size)
    }

    /// Counts a download answered before the router — once its file is open or its bytes
    /// read: a blob removed meanwhile goes to the router, which counts its own answer.
    private func countDownload(status: HTTPResponse.Status = .ok, bytes: UInt64) {
        metrics.countFastPathAttachmentAnswer(status: status.code)
        metrics.attachmentBytesSent.increment(by: Int(bytes))
    }

    /// The status line and fields of a public `200` of the whole blob, as NIO's encoder
    /// writes ``attachmentAnswer(_:isPublic:ifNoneMatch:range:ifRange:)``'s (without `Date`
    /// and the request id, which ``PollResponseWriter`` adds).
    static func encodedPublicHead(_ reference: AttachmentReference) -> ByteBuffer {
        var head = ByteBuffer()
        let answer = try? AttachmentsController.attachmentAnswer(reference, isPublic: true, ifNoneMatch: nil, range: nil, ifRange: nil)
        head.writeString("HTTP/1.1 200 OK\r\n")
        for field in answer?.headers ?? [:] {
            head.writeString(field.name.rawName)
            head.writeString(": ")
            head.writeString(field.value)
            head.writeString("\r\n")
        }
        return head
    }

    /// A download of a small blob of a public collection whose reference the server remembers
    /// (``AttachmentMemory``) — its bytes read from the store's file, or kept in memory —
    /// answered as the router would — same status, headers and count — before the request
    /// reaches it; nil sends it to the router.
    func attachmentFromMemory(_ request: HTTPRequest) -> (status: HTTPResponse.Status, headers: HTTPFields, body: AttachmentBody)? {
        // Partitions are private: their downloads are the router's.
        guard request.method == .get || request.method == .head, case .attachment(let path, let hash) = RequestTarget(path: request.path ?? ""),
              path.key == nil
        else { return nil }
        return attachmentFromMemory(
            collection: path.name, sha256: hash, ifNoneMatch: request.headerFields[.ifNoneMatch], range: request.headerFields[.range],
            ifRange: request.headerFields[.ifRange], sendsBody: request.method == .get, allowsFile: false)
    }

    /// The answer to a download of `sha256` from the public collection `name`, when memory has
    /// its reference (and, for the body, the store's file or memory its bytes); nil sends the
    /// request to the router. `allowsFile`: the caller sends a file region (`sendfile`);
    /// otherwise a small blob's bytes are read. Counted here.
    func attachmentFromMemory(
        collection name: String, sha256 hash: String, ifNoneMatch: String?, range: String?, ifRange: String?, sendsBody: Bool, allowsFile: Bool
    ) -> (status: HTTPResponse.Status, headers: HTTPFields, body: AttachmentBody)? {
        guard CollectionName.isValid(name), AttachmentReference.isSHA256(hash),
              let collection = CollectionPath(name: name, key: nil), accessControl.policy.isPublicRead(collection),
              let reference = attachmentMemory.reference(of: hash, in: name),
              let answer = try? AttachmentsController.attachmentAnswer(reference, isPublic: true, ifNoneMatch: ifNoneMatch, range: range, ifRange: ifRange)
        else { return nil }
        guard let served = answer.range, sendsBody else {
            metrics.countFastPathAttachmentAnswer(status: answer.status.code)
            return (answer.status, answer.headers, .none)
        }
        let file = attachmentFiles.flatMap { files in attachmentMemory.file(of: hash, size: reference.size, at: { files.attachmentFile(hash) }) }
        if allowsFile, let file {
            countDownload(status: answer.status, bytes: UInt64(served.count))
            return (answer.status, answer.headers, .file(file, range: served))
        }
        guard reference.size <= AttachmentMemory.smallBlobBytes, let whole = file?.read(reference.size) ?? attachmentMemory.body(of: hash)
        else { return nil }
        countDownload(status: answer.status, bytes: UInt64(served.count))
        return (answer.status, answer.headers, .bytes(whole.getSlice(at: whole.readerIndex + Int(served.lowerBound), length: served.count)!))
    }

    /// `"TAG"` → `TAG` when the header is exactly one strong entity tag; nil otherwise.
    static func singleStrongTag(_ header: String) -> String? {
        let utf8 = header.utf8
        guard utf8.count >= 3, utf8.first == UInt8(ascii: "\""), utf8.last == UInt8(ascii: "\""),
              !utf8.dropFirst().dropLast().contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: ",") })
        else { return nil }
        return String(header.dropFirst().dropLast())
    }

    /// Answers a collection poll (already parsed by NIO) from memory when it can; nil sends
    /// it to the router. See ``answerFromMemory(collection:ifNoneMatch:acceptEncoding:allowsBody:start:)``.
    func fastAnswer(to request: HTTPRequest, start: ContinuousClock.Instant) -> FastAnswer? {
        // Partitions are private: their polls are the router's.
        guard request.method == .get || request.method == .head, request.headerFields[.connection] == nil,
              case .collection(let path) = RequestTarget(path: request.path ?? ""), path.key == nil
        else { return nil }
        var tags = request.headerFields[values: .ifNoneMatch].makeIterator()
        guard let ifNoneMatch = tags.next(), tags.next() == nil else { return nil }
        return answerFromMemory(
            collection: path.name, ifNoneMatch: ifNoneMatch,
            acceptEncoding: request.headerFields[values: .acceptEncoding], allowsBody: request.method == .get, start: start)
    }

    /// Answers a poll from memory when it can: the client's token is current (`304`), or
    /// it is an older one whose delta is already cached. The decision is `ServeDecision`'s,
    /// as on the router's path, and so are the headers and the metrics. Left to the router:
    /// any poll while the server has private collections (the router checks every bearer
    /// token then: a bad one is a 401 even on a public collection), 304s while 304s are
    /// logged (the log needs the router's request context), deltas not cached yet.
    func answerFromMemory(
        collection name: String, ifNoneMatch: String, acceptEncoding: [String], allowsBody: Bool, start: ContinuousClock.Instant
    ) -> FastAnswer? {
        guard accessControl.policy.everythingPublic, CollectionName.isValid(name), reviewed[name] == nil, let served = heads[name] else { return nil }
        switch planPoll(served, ifNoneMatch: ifNoneMatch, ifModifiedSince: nil, gzip: DeltaSnapAPI.acceptsGzip(acceptEncoding), allowsBody: allowsBody) {
        case .notModified(let served) where !logNotModified:
            metrics.countFastPathAnswer(.notModified, since: start)
            return .notModified(served)
        case .cachedDelta(let cached):
            metrics.countFastPathAnswer(.delta, since: start)
            metrics.countBytes(cached.body.readableBytes, for: .delta)
            return .delta(cached)
        case .notModified, .read, .modifiedSince:
            return nil
        }
    }
}
