import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird

/// The URLs a shared cache (a CDN, nginx `proxy_cache`) can serve (docs/PROTOCOL.md §8):
/// the signed index with a short `max-age`, and deltas and full bodies named by their
/// tokens, which never change once answered.
extension CollectionsController {
    /// The cacheable URLs of the collection or partition whose path is `base`.
    func addPublicationRoutes<Context: RequestContext>(at base: String, to router: RouteCollection<Context>) {
        router.get(RouterPath(base + "/deltas/:base/:target")) { request, context in
            try await immutableDelta(request, context: context)
        }
        router.head(RouterPath(base + "/deltas/:base/:target")) { request, context in
            Self.headOnly(try await immutableDelta(request, context: context))
        }
        router.get(RouterPath(base + "/snapshots/:token")) { request, context in
            try await immutableFull(request, context: context)
        }
        router.head(RouterPath(base + "/snapshots/:token")) { request, context in
            Self.headOnly(try await immutableFull(request, context: context))
        }
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            for path in [base + "/deltas/:base/:target", base + "/snapshots/:token"] {
                router.on(RouterPath(path), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
            }
        }
    }

    /// `GET /v1/collections/{name}/deltas/{base}/{target}`: the changes from `base` to the
    /// head `target`, cacheable for ever; a base below the floor (or of another epoch) is
    /// redirected to the full body of `target`.
    func immutableDelta(_ request: Request, context: some RequestContext) async throws -> Response {
        let start = ContinuousClock.now
        let path = try collectionPath(context)
        let (head, isPublic) = try await publishedHead(path, request)
        let name = head.name
        // The rows of docs/PROTOCOL.md §8.3 in their order: tokens that cannot be ours, then
        // the target (superseded or not known yet), then the base.
        let base = try Self.token(in: context, "base")
        let target = try Self.token(in: context, "target")
        guard let baseToken = ServerToken(base) else { throw APIError.badToken(base) }
        try requireCurrent(target, head: head)
        if baseToken.epoch != head.epoch || baseToken.version < head.floor {
            return Self.redirectToSnapshot(path, target: target, isPublic: isPublic)
        }
        guard baseToken.version <= head.version else {
            throw APIError(.notFound, "unknown_base", "token \(base) is newer than \(target); no delta leads back in time")
        }
        let gzip = DeltaSnapAPI.acceptsGzip(request.headers[values: .acceptEncoding])
        do {
            return Self.cacheable(try await deltaResponse(
                name: name, head: head, sinceVersion: baseToken.version, base: base, gzip: gzip, since: start, target: target), isPublic: isPublic)
        } catch DeltaUnavailable.belowFloor {
            // Compacted by another process since the heads in memory were read: the read
            // transaction knows the new floor, and a delta URL never answers a full body.
            return Self.redirectToSnapshot(path, target: target, isPublic: isPublic)
        }
    }

    /// Below the floor stays below the floor (it only rises): the redirect is as permanent as
    /// the delta it stands for.
    private static func redirectToSnapshot(_ path: CollectionPath, target: String, isPublic: Bool) -> Response {
        Response(status: .permanentRedirect, headers: [
            .location: "\(path.urlPath)/snapshots/\(target.percentEncodedPathSegment)", .cacheControl: CacheRule.immutable(isPublic: isPublic),
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
        let path = try collectionPath(context)
        let (head, isPublic) = try await publishedHead(path, request)
        let target = try Self.token(in: context, "token")
        let query = request.uri.queryParameters
        if query.has("limit") || query.has("after") {
            return Self.cacheable(try await page(of: path, target: target, head: head, query: query), isPublic: isPublic)
        }
        try requireCurrent(target, head: head)
        let gzip = DeltaSnapAPI.acceptsGzip(request.headers[values: .acceptEncoding])
        return Self.cacheable(try await fullResponse(head: head, gzip: gzip, since: start, target: target), isPublic: isPublic)
    }

    /// The largest `limit` of a page.
    static let largestPage = 1_000

    /// `…/snapshots/{token}?limit=N&after=ID`: up to N records of version `target` after ID
    /// in id order, and the `next` to ask for (docs/PROTOCOL.md §8.6). A page never shifts:
    /// the version is kept while pages of it are asked for (``PagedVersions``).
    private func page(of path: CollectionPath, target: String, head: CollectionHead, query: Parameters) async throws -> Response {
        guard let token = ServerToken(target) else { throw APIError.badToken(target) }
        let limit: Int
        if let text = query.get("limit") {
            guard let value = Int(text), (1...Self.largestPage).contains(value) else {
                throw APIError(.badRequest, "invalid_limit", "limit must be an integer from 1 to \(Self.largestPage)")
            }
            limit = value
        } else {
            limit = 100
        }
        let after = query.get("after").flatMap { $0.isEmpty ? nil : $0 }
        if token.epoch == head.epoch && token.version > head.version { try requireCurrent(target, head: head) }
        guard let page = try await pagedVersions.page(of: head.name, token: target, current: head, after: after, limit: limit, store: store) else {
            throw APIError(.notFound, "superseded", "token \(target) is no longer the newest and its pages are no longer kept (now \(head.token)); page from the new head")
        }
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: page))
    }

    /// The head of a collection or partition that has cacheable URLs, and whether anyone may
    /// read it (then a shared cache may keep its answers). A partition's URLs answer only
    /// those who may read it, and no cache keeps them (``CacheRule``); the collections made
    /// private by `--private-collections` have none.
    /// A preview device (PROTOCOL.md §13.5) gets the workspace's head, never cached by others.
    private func publishedHead(_ path: CollectionPath, _ request: Request) async throws -> (CollectionHead, isPublic: Bool) {
        if let workspace = try await reviewRouting.previewedName(of: path, for: request), let served = try await heads.served(workspace, store: store) {
            return (served.head, false)
        }
        let name = path.description
        if path.key == nil, access.rules[path.name] == nil, !access.isPublicRead(path) {
            throw APIError(.notFound, "not_published", "collection \"\(name)\" is private: it has no cacheable URLs; use GET /v1/collections/\(name)")
        }
        let isPublic = access.isPublicRead(path)
        if !isPublic { _ = try await authorize(request, path, for: .read) }
        guard let served = try await heads.served(name, store: store) else { throw APIError.unknownCollection(name) }
        return (served.head, isPublic)
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

    private static func cacheable(_ response: Response, isPublic: Bool) -> Response {
        var response = response
        response.headers[.cacheControl] = CacheRule.immutable(isPublic: isPublic)
        response.headers[.vary] = "Accept-Encoding"
        return response
    }
}

extension APIError {
    static func badToken(_ token: String) -> APIError {
        APIError(.badRequest, "bad_token", "\"\(token)\" is not a token this server issued")
    }
}
