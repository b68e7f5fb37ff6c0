import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird

/// An answer the server can give from memory alone, before the request reaches the router.
enum FastAnswer {
    /// `304 Not Modified` with these headers.
    case notModified(HTTPFields)
    /// `200` with a cached delta body.
    case delta(HTTPFields, ByteBuffer)
}

extension DeltaSnapService {
    /// The route label the router gives `GET /v1/collections/{name}` in the metrics.
    static let collectionRoute = "/v1/collections/{name}"
    private static let collectionsPrefix = "/v1/collections/"

    /// Answers a collection poll from memory when it can: the client's token is current
    /// (`304`), or it is an older one whose delta is already cached. Everything else returns
    /// nil and goes to the router. The decision is `ServeDecision`'s, as on the router's
    /// path; only requests the fast path cannot answer exactly as the router would are
    /// left alone: private collections (they need authorization), `If-Modified-Since` alone
    /// (it needs the database), several `If-None-Match` fields, `Connection` handling, and
    /// 304s while 304s are logged (the log needs the router's request context).
    func fastAnswer(to request: HTTPRequest, start: ContinuousClock.Instant) -> FastAnswer? {
        guard request.method == .get || request.method == .head,
              let path = request.path, path.utf8.count > Self.collectionsPrefix.utf8.count,
              path.hasPrefix(Self.collectionsPrefix)
        else { return nil }
        let name = String(path.utf8.dropFirst(Self.collectionsPrefix.utf8.count))!
        // With any private collection the router checks every bearer token (a bad one is a
        // 401 even on a public collection), so polls all go there.
        guard CollectionName.isValid(name), configuration.access.privateCollections.isEmpty,
              request.headerFields[.connection] == nil,
              let served = heads[name]
        else { return nil }
        var tags = request.headerFields[values: .ifNoneMatch].makeIterator()
        guard let ifNoneMatch = tags.next(), tags.next() == nil else { return nil }

        let decision: ServeDecision
        if ifNoneMatch == served.validatorHeaders[.eTag] {
            decision = .notModified
        } else {
            decision = ServeDecision.decide(ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: nil), head: served.head) { _ in nil }
        }
        switch decision {
        case .notModified where !configuration.logNotModified:
            metrics.countOutcome(.notModified, since: start)
            metrics.countResponse(route: Self.collectionRoute, status: 304)
            metrics.countFastPathAnswer()
            return .notModified(served.validatorHeaders)
        case .delta(_, let base) where request.method == .get:
            let gzip = Self.acceptsGzip(request.headerFields[values: .acceptEncoding])
            guard let cached = deltas[DeltaCache.Key(collection: name, base: base, headVersion: served.head.version, gzip: gzip)] else { return nil }
            var headers = bodyHeaders(for: cached.head, gzip: gzip)
            headers[.contentLength] = String(cached.body.readableBytes)
            metrics.countOutcome(.delta, since: start)
            metrics.countBytes(cached.body.readableBytes, for: .delta)
            metrics.countResponse(route: Self.collectionRoute, status: 200)
            metrics.countFastPathAnswer()
            return .delta(headers, cached.body)
        default:
            return nil
        }
    }
}

extension DeltaSnapService {
    /// The head to answer a poll read from raw bytes (``PollRequestHead``) with a `304`, or
    /// nil when it is not answered `304` from memory alike on the router's path: the same
    /// decision and metrics as ``fastAnswer(to:start:)``; ``RawPollHandler`` writes the
    /// head's ``ServedHead/encodedNotModifiedHead`` with the same headers.
    func rawNotModified(to poll: PollRequestHead, start: ContinuousClock.Instant) -> ServedHead? {
        guard configuration.access.privateCollections.isEmpty, !configuration.logNotModified,
              let served = heads[poll.collection]
        else { return nil }
        if poll.ifNoneMatch != served.validatorHeaders[.eTag] {
            let decision = ServeDecision.decide(ConditionalRequest(ifNoneMatch: poll.ifNoneMatch, ifModifiedSince: nil), head: served.head) { _ in nil }
            guard decision == .notModified else { return nil }
        }
        metrics.countOutcome(.notModified, since: start)
        metrics.countResponse(route: Self.collectionRoute, status: 304)
        metrics.countFastPathAnswer()
        return served
    }
}
