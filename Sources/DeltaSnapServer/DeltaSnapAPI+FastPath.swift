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

extension DeltaSnapAPI {
    private static let collectionsPrefix = "/v1/collections/"

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
        guard request.method == .get || request.method == .head,
              let path = request.path, path.utf8.count > Self.collectionsPrefix.utf8.count,
              path.hasPrefix(Self.collectionsPrefix),
              request.headerFields[.connection] == nil
        else { return nil }
        var tags = request.headerFields[values: .ifNoneMatch].makeIterator()
        guard let ifNoneMatch = tags.next(), tags.next() == nil else { return nil }
        return answerFromMemory(
            collection: String(path.utf8.dropFirst(Self.collectionsPrefix.utf8.count))!, ifNoneMatch: ifNoneMatch,
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
        guard accessControl.policy.everythingPublic, CollectionName.isValid(name), let served = heads[name] else { return nil }
        if served.isCurrent(ifNoneMatch: ifNoneMatch) {
            guard !configuration.logNotModified else { return nil }
            metrics.countFastPathAnswer(.notModified, since: start)
            return .notModified(served)
        }
        func cachedDelta(from base: String) -> FastAnswer? {
            guard let cached = deltas[DeltaCache.Key(head: served.head, base: base, gzip: Self.acceptsGzip(acceptEncoding))] else { return nil }
            metrics.countFastPathAnswer(.delta, since: start)
            metrics.countBytes(cached.body.readableBytes, for: .delta)
            return .delta(cached)
        }
        // The common older poll, one strong tag sent back as received: its cached delta is
        // keyed by epoch, head and floor, so a hit is the decision table's answer already.
        let tag = allowsBody ? Self.singleStrongTag(ifNoneMatch) : nil
        if let tag, let hit = cachedDelta(from: tag) { return hit }
        let request = ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: nil)
        switch ServeDecision.decide(request, head: served.head, firstVersionCommitted: { _ in nil }) {
        case .notModified where !configuration.logNotModified:
            metrics.countFastPathAnswer(.notModified, since: start)
            return .notModified(served)
        case .delta(_, let base) where allowsBody && base != tag:
            return cachedDelta(from: base)
        default:
            return nil
        }
    }
}
