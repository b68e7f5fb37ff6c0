import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird

/// The URLs a shared cache (a CDN, nginx `proxy_cache`) can serve (docs/PROTOCOL.md §8):
/// the signed index with a short `max-age`, and deltas and full bodies named by their
/// tokens, which never change once answered.
extension DeltaSnapAPI {
    static let immutable = "public, max-age=31536000, immutable"

    func addPublicationRoutes<Routes: RouterMethods>(to router: Routes) {
        router.get("/v1/index") { [self] request, _ in try await index(request) }
        router.head("/v1/index") { [self] request, _ in Self.headOnly(try await index(request)) }
        router.get("/v1/collections/:name/deltas/:base/:target") { [self] request, context in
            try await immutableDelta(request, context: context)
        }
        router.head("/v1/collections/:name/deltas/:base/:target") { [self] request, context in
            Self.headOnly(try await immutableDelta(request, context: context))
        }
        router.get("/v1/collections/:name/snapshots/:token") { [self] request, context in
            try await immutableFull(request, context: context)
        }
        router.head("/v1/collections/:name/snapshots/:token") { [self] request, context in
            Self.headOnly(try await immutableFull(request, context: context))
        }
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            for path in ["/v1/index", "/v1/collections/:name/deltas/:base/:target", "/v1/collections/:name/snapshots/:token"] {
                router.on(RouterPath(path), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
            }
        }
    }

    /// `GET /v1/index`: every public collection's token, floor and state digest, signed.
    func index(_ request: Request) async throws -> Response {
        let published = try await publication.current(heads: heads.all.map(\.head), store: store, now: Int64(Date().timeIntervalSince1970))
        let maxAge = configuration.indexMaxAge
        let headers: HTTPFields = [
            .contentType: "application/json",
            .cacheControl: "public, max-age=\(maxAge), stale-while-revalidate=\(maxAge)",
            .eTag: published.etag,
        ]
        let held = ConditionalRequest(ifNoneMatch: request.headers[values: .ifNoneMatch].joinedOrNil, ifModifiedSince: nil)
        if held.matches(entityTag: published.etag) {
            return Response(status: .notModified, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: published.document))
    }

    /// `GET /v1/collections/{name}/deltas/{base}/{target}`: the changes from `base` to the
    /// head `target`, cacheable for ever; a base below the floor (or of another epoch) is
    /// redirected to the full body of `target`.
    func immutableDelta(_ request: Request, context: some RequestContext) async throws -> Response {
        let start = ContinuousClock.now
        let name = try context.parameters.require("name")
        let head = try publishedHead(name)
        // The rows of docs/PROTOCOL.md §8.3 in their order: tokens that cannot be ours, then
        // the target (superseded or not known yet), then the base.
        let base = try Self.token(in: context, "base")
        let target = try Self.token(in: context, "target")
        guard let baseToken = ServerToken(base) else { throw APIError.badToken(base) }
        try requireCurrent(target, head: head)
        if baseToken.epoch != head.epoch || baseToken.version < head.floor {
            return Self.redirectToSnapshot(name: name, target: target)
        }
        guard baseToken.version <= head.version else {
            throw APIError(.notFound, "unknown_base", "token \(base) is newer than \(target); no delta leads back in time")
        }
        let gzip = Self.acceptsGzip(request.headers[values: .acceptEncoding])
        do {
            return Self.cacheable(try await deltaResponse(
                name: name, head: head, sinceVersion: baseToken.version, base: base, gzip: gzip, since: start, target: target))
        } catch DeltaUnavailable.belowFloor {
            // Compacted by another process since the heads in memory were read: the read
            // transaction knows the new floor, and a delta URL never answers a full body.
            return Self.redirectToSnapshot(name: name, target: target)
        }
    }

    /// Below the floor stays below the floor (it only rises): the redirect is as permanent as
    /// the delta it stands for.
    private static func redirectToSnapshot(name: String, target: String) -> Response {
        Response(status: .permanentRedirect, headers: [
            .location: "/v1/collections/\(name)/snapshots/\(target.percentEncodedPathSegment)", .cacheControl: immutable,
        ])
    }

    /// A token from a path segment (docs/PROTOCOL.md §8.3: clients encode every byte outside
    /// RFC 3986's unreserved characters).
    private static func token(in context: some RequestContext, _ parameter: String) throws -> String {
        try percentDecodedParameter(parameter, in: context, invalid: APIError.badToken)
    }

    /// `GET /v1/collections/{name}/snapshots/{token}`: the full body of the head `token`,
    /// cacheable for ever.
    func immutableFull(_ request: Request, context: some RequestContext) async throws -> Response {
        let start = ContinuousClock.now
        let name = try context.parameters.require("name")
        let head = try publishedHead(name)
        let target = try Self.token(in: context, "token")
        try requireCurrent(target, head: head)
        let gzip = Self.acceptsGzip(request.headers[values: .acceptEncoding])
        return Self.cacheable(try await fullResponse(head: head, gzip: gzip, since: start, target: target))
    }

    /// The head of a collection that has cacheable URLs: private ones never do.
    private func publishedHead(_ name: String) throws -> CollectionHead {
        guard CollectionName.isValid(name) else { throw APIError.badCollectionName(name) }
        guard !configuration.access.privateCollections.contains(name) else {
            throw APIError(.notFound, "not_published", "collection \"\(name)\" is private: it has no cacheable URLs; use GET /v1/collections/\(name)")
        }
        guard let served = heads[name] else { throw APIError.unknownCollection(name) }
        return served.head
    }

    /// Only the head can be answered exactly: an older token's state is gone, a newer one
    /// is not known here yet (a read replica behind its primary). Both are `404 no-store`,
    /// so a cache never keeps either.
    func requireCurrent(_ target: String, head: CollectionHead) throws {
        guard let token = ServerToken(target) else { throw APIError.badToken(target) }
        if token == head.token { return }
        if token.epoch == head.epoch && token.version > head.version {
            throw APIError(.notFound, "unknown_target", "token \(target) is not known here yet (this server is at \(head.token)); retry shortly", headers: [.retryAfter: "1"])
        }
        throw APIError(.notFound, "superseded", "token \(target) is no longer the newest (now \(head.token)); fetch /v1/index again")
    }

    private static func cacheable(_ response: Response) -> Response {
        var response = response
        response.headers[.cacheControl] = immutable
        response.headers[.vary] = "Accept-Encoding"
        return response
    }
}

extension APIError {
    static func badToken(_ token: String) -> APIError {
        APIError(.badRequest, "bad_token", "\"\(token)\" is not a token this server issued")
    }
}
