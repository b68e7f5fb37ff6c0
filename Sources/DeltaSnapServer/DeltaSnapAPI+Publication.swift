import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird

/// The URLs a shared cache (a CDN, nginx `proxy_cache`) can serve (docs/PROTOCOL.md §8):
/// the signed index with a short `max-age`, and deltas and full bodies named by their
/// tokens, which never change once answered.
extension DeltaSnapAPI {
    static let immutable = "public, max-age=31536000, immutable"

    /// The URLs named by tokens never change: a shared cache keeps a public one, only the
    /// reader's own cache a partition's.
    static func cacheControl(isPublic: Bool) -> String {
        isPublic ? immutable : "private, max-age=31536000, immutable"
    }

    /// The cacheable URLs of the collection or partition whose path is `base`.
    func addPublicationRoutes<Routes: RouterMethods>(at base: String, to router: Routes) {
        router.get(RouterPath(base + "/deltas/:base/:target")) { [self] request, context in
            try await immutableDelta(request, context: context)
        }
        router.head(RouterPath(base + "/deltas/:base/:target")) { [self] request, context in
            Self.headOnly(try await immutableDelta(request, context: context))
        }
        router.get(RouterPath(base + "/snapshots/:token")) { [self] request, context in
            try await immutableFull(request, context: context)
        }
        router.head(RouterPath(base + "/snapshots/:token")) { [self] request, context in
            Self.headOnly(try await immutableFull(request, context: context))
        }
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            for path in [base + "/deltas/:base/:target", base + "/snapshots/:token"] {
                router.on(RouterPath(path), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
            }
        }
    }

    /// `GET /v1/index`: the public collections' tokens, floors and state digests, signed;
    /// with a bearer token, the caller's view: those plus every collection and partition
    /// they may read (docs/PROTOCOL.md §8.1, §10).
    func index(_ request: Request) async throws -> Response {
        let policy = accessControl.policy
        // Without rules or private collections every caller sees the same index: a token is
        // not even looked at (as before views existed).
        let principal = policy.everythingPublic && policy.rules.collections.isEmpty ? Principal.anonymous : try await accessControl.principal(of: request)
        let isView = principal.subject != Principal.anonymous.subject || principal.isAdmin || principal.claims != nil
        let now = Int64(Date().timeIntervalSince1970)
        let published: IndexPublisher.Published
        // Views are kept per subject and claims: another token of the same user may name
        // other partitions in its claims.
        let slot = principal.claims.map { "\($0.sub.value)\u{0}\(($0.read ?? []).joined(separator: ","))\u{0}\(($0.write ?? []).joined(separator: ","))" }
            ?? principal.subject
        if isView, let cached = publication.cached(for: slot, now: now), let dependencies = cached.dependencies,
           heads.stillHolds(dependencies)
        {
            // The common poll of a view: nothing it was built from changed, so it is the same
            // document — no membership, head or store read, no signature.
            published = cached
        } else if isView {
            let (listed, dependencies) = try await viewHeads(of: principal)
            published = try await publication.current(
                heads: listed, subject: principal.subject, slot: slot, dependencies: dependencies, store: store, now: now)
        } else {
            let listed = heads.all.map(\.head).filter { name in
                CollectionPath(name.name).map { $0.key == nil && policy.isPublicRead($0) } ?? false
            }
            published = try await publication.current(heads: listed, subject: nil, slot: "", dependencies: nil, store: store, now: now)
        }
        let maxAge = configuration.indexMaxAge
        let headers: HTTPFields = [
            .contentType: "application/json",
            // A view is one user's: only their own cache may keep it.
            .cacheControl: isView ? "private, no-cache" : "public, max-age=\(maxAge), stale-while-revalidate=\(maxAge)",
            .eTag: published.etag,
        ]
        let held = ConditionalRequest(ifNoneMatch: request.headers[values: .ifNoneMatch].joinedOrNil, ifModifiedSince: nil)
        if held.matches(entityTag: published.etag) {
            return Response(status: .notModified, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: published.document))
    }

    /// What `principal` may read: the collections (public, and private ones their token
    /// names), their own partitions, the partitions their memberships and claims name.
    /// Partitions of public partitioned collections are not listed unless named so: there
    /// may be millions.
    /// The dependencies are every head it looked at, listed or not (a partition that does not
    /// exist yet too): while they hold, the view is the same.
    func viewHeads(of principal: Principal) async throws -> ([CollectionHead], ViewDependencies) {
        var listed: [CollectionHead] = []
        let collections = heads.all
        var dependencies = ViewDependencies(heads: [], collectionCount: collections.count)
        for served in collections {
            dependencies.heads.append((served.head.name, served.head.token, served.head.floor))
            guard let path = CollectionPath(served.head.name) else { continue }
            if try await accessControl.mayRead(path, as: principal, memberships: memberships) { listed.append(served.head) }
        }
        var candidates = Set<String>()
        if let claims = principal.claims {
            for (name, rule) in accessControl.policy.rules.collections where rule.partitioned {
                if let own = CollectionPath(name: name, key: principal.subject) { candidates.insert(own.description) }
            }
            candidates.formUnion(try await memberships.roles(of: principal.subject).keys)
            candidates.formUnion(((claims.read ?? []) + (claims.write ?? [])).filter(CollectionPath.isPartition))
        }
        for name in candidates.sorted(by: { $0.utf8Precedes($1) }) {
            let head = try await heads.head(of: name, store: store)
            dependencies.heads.append((name, head?.token, head?.floor ?? 0))
            guard let head, let path = CollectionPath(name), try await accessControl.mayRead(path, as: principal, memberships: memberships)
            else { continue }
            listed.append(head)
        }
        return (listed.sorted { $0.name.utf8Precedes($1.name) }, dependencies)
    }

    /// `GET /v1/collections/{name}/deltas/{base}/{target}`: the changes from `base` to the
    /// head `target`, cacheable for ever; a base below the floor (or of another epoch) is
    /// redirected to the full body of `target`.
    func immutableDelta(_ request: Request, context: some RequestContext) async throws -> Response {
        let start = ContinuousClock.now
        let path = try collectionPath(context)
        let (head, isPublic) = try await publishedHead(path, request)
        let name = path.description
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
        let gzip = Self.acceptsGzip(request.headers[values: .acceptEncoding])
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
            .location: "\(path.urlPath)/snapshots/\(target.percentEncodedPathSegment)", .cacheControl: cacheControl(isPublic: isPublic),
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
        try requireCurrent(target, head: head)
        let gzip = Self.acceptsGzip(request.headers[values: .acceptEncoding])
        return Self.cacheable(try await fullResponse(head: head, gzip: gzip, since: start, target: target), isPublic: isPublic)
    }

    /// The head of a collection or partition that has cacheable URLs, and whether anyone may
    /// read it (then a shared cache may keep its answers). A partition's URLs answer only
    /// those who may read it, for the browser's own cache (`private`); the collections made
    /// private by `--private-collections` have none.
    private func publishedHead(_ path: CollectionPath, _ request: Request) async throws -> (CollectionHead, isPublic: Bool) {
        let name = path.description
        if path.key == nil, configuration.access.rules[path.name] == nil, !configuration.access.isPublicRead(path) {
            throw APIError(.notFound, "not_published", "collection \"\(name)\" is private: it has no cacheable URLs; use GET /v1/collections/\(name)")
        }
        let isPublic = configuration.access.isPublicRead(path)
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
        response.headers[.cacheControl] = cacheControl(isPublic: isPublic)
        response.headers[.vary] = "Accept-Encoding"
        return response
    }
}

extension APIError {
    static func badToken(_ token: String) -> APIError {
        APIError(.badRequest, "bad_token", "\"\(token)\" is not a token this server issued")
    }
}
