import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

/// `GET /v1/index`: the public index, a user's view, and the long-poll on either
/// (docs/PROTOCOL.md §8.1, §10, §11).
extension DeltaSnapAPI {
    /// The longest `?wait=` in seconds: a held request outlives no ordinary proxy timeout
    /// by much, and a client asks again anyway.
    static let longestWait = 60

    /// `GET /v1/index`: the public collections' tokens, floors and state digests, signed;
    /// with a bearer token, the caller's view: those plus every collection and partition
    /// they may read.
    ///
    /// With `?wait=SECONDS` (1–60) and the client's `ETag` (in `If-None-Match`, or in
    /// `?etag=` where a shared cache sits between: caches drop `If-None-Match` on the way to
    /// the origin), the answer is held until the index differs from that `ETag` or the wait
    /// ends. Every held answer carries `DeltaSnap-Cursor`, which the client sends back as
    /// `?cursor=`: clients that waited together ask the same URL next, so a cache collapses
    /// them into one origin request, and no client is answered twice from one cached entry.
    func index(_ request: Request) async throws -> Response {
        let policy = accessControl.policy
        // Without rules or private collections every caller sees the same index: a token is
        // not even looked at (as before views existed).
        let principal = policy.everythingPublic && policy.rules.collections.isEmpty ? Principal.anonymous : try await accessControl.principal(of: request)
        let isView = principal.subject != Principal.anonymous.subject || principal.isAdmin || principal.claims != nil
        let query = request.uri.queryParameters
        let wait = try Self.waitSeconds(query.get("wait"))
        let ifNoneMatch = request.headers[values: .ifNoneMatch].joinedOrNil
        let maxAge = configuration.indexMaxAge
        var headers: HTTPFields = [
            .contentType: "application/json",
            // A view is one user's: only their own cache may keep it.
            .cacheControl: isView ? "private, no-cache" : "public, max-age=\(maxAge), stale-while-revalidate=\(maxAge)",
        ]
        // `*` names no version to wait past: answered at once, as any conditional request.
        let known = (ifNoneMatch ?? query.get("etag")).flatMap { $0.trimmingCharacters(in: .whitespaces) == "*" ? nil : $0 }
        guard let wait, let known else {
            let published = try await currentIndex(for: principal, isView: isView)
            headers[.eTag] = published.etag
            if ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: nil).matches(entityTag: published.etag) {
                return Response(status: .notModified, headers: headers)
            }
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: published.document))
        }
        let cursor = try Self.cursor(query.get("cursor"))
        let deadline = ContinuousClock.now + .seconds(wait)
        let held = ConditionalRequest(ifNoneMatch: known, ifModifiedSince: nil)
        while true {
            // Read before the answer is built: a change in between wakes the wait below.
            let generation = waiters.generation
            let published = try await currentIndex(for: principal, isView: isView)
            let changed = !held.matches(entityTag: published.etag)
            if !changed {
                switch await waiters.wait(after: generation, until: deadline) {
                case .changed: continue
                case .full: throw APIError.tooManyWaiters(waiters.capacity)
                case .timedOut, .closed: break
                }
            }
            let answer = Self.heldAnswer(published, changed: changed, viaIfNoneMatch: ifNoneMatch != nil, cursor: cursor, headers: headers)
            return Response(status: answer.status, headers: answer.headers, body: answer.body.map { .init(byteBuffer: $0) } ?? .init())
        }
    }

    /// The answer to a held request (docs/PROTOCOL.md §11.2), on the router's path and the
    /// fast path alike: the index when it differs from the held `ETag`; when it does not, a
    /// `304` to a request that sent `If-None-Match`, the same index to one that sent only
    /// `?etag=` (a cache's). Always a `DeltaSnap-Cursor` past the one received.
    static func heldAnswer(
        _ published: IndexPublisher.Published, changed: Bool, viaIfNoneMatch: Bool, cursor: Int64, headers: HTTPFields
    ) -> (status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer?) {
        var headers = headers
        headers[.eTag] = published.etag
        // Never the cursor received: a client answered from a cached entry asks a new URL.
        headers[.deltaSnapCursor] = String(max(Int64(Date().timeIntervalSince1970), cursor + 1))
        if !changed, viaIfNoneMatch { return (.notModified, headers, nil) }
        return (.ok, headers, published.document)
    }

    /// A held request on the public index that memory alone can park (``FastPathHandler``):
    /// what it waits for and how to answer it.
    struct ParkableWait {
        var generation: UInt64
        var deadline: ContinuousClock.Instant
        /// The public index it holds (its `ETag` is the client's).
        var published: IndexPublisher.Published
        var viaIfNoneMatch: Bool
        var cursor: Int64
        var headers: HTTPFields
    }

    /// `GET /v1/index?wait=` for the public index whose client holds the current one, or nil
    /// (the router answers: a view, a bad parameter, an index that changed or must be rebuilt).
    func parkableWait(_ request: HTTPRequest) -> ParkableWait? {
        guard request.method == .get || request.method == .head, let target = request.path, target.hasPrefix("/v1/index?") else { return nil }
        let policy = accessControl.policy
        // A token names a view (or is a 401): the router decides, unless tokens are not looked at.
        guard request.headerFields[.authorization] == nil || (policy.everythingPublic && policy.rules.collections.isEmpty) else { return nil }
        let uri = URI(target)
        guard uri.path == "/v1/index" else { return nil }
        let query = uri.queryParameters
        let ifNoneMatch = request.headerFields[values: .ifNoneMatch].joinedOrNil
        guard let wait = try? Self.waitSeconds(query.get("wait")), let cursor = try? Self.cursor(query.get("cursor")),
              let known = ifNoneMatch ?? query.get("etag"), known.trimmingCharacters(in: .whitespaces) != "*"
        else { return nil }
        let generation = waiters.generation
        guard let published = publication.freshPublic(heads: publicHeads, now: Int64(Date().timeIntervalSince1970)),
              ConditionalRequest(ifNoneMatch: known, ifModifiedSince: nil).matches(entityTag: published.etag)
        else { return nil }
        let maxAge = configuration.indexMaxAge
        return ParkableWait(
            generation: generation, deadline: .now + .seconds(wait), published: published, viaIfNoneMatch: ifNoneMatch != nil, cursor: cursor,
            headers: [.contentType: "application/json", .cacheControl: "public, max-age=\(maxAge), stale-while-revalidate=\(maxAge)"])
    }

    /// The index `principal` sees now: built (and signed) only when a head it lists changed.
    func currentIndex(for principal: Principal, isView: Bool) async throws -> IndexPublisher.Published {
        let now = Int64(Date().timeIntervalSince1970)
        // Views are kept per subject and claims: another token of the same user may name
        // other partitions in its claims.
        let slot = principal.claims.map { "\($0.sub.value)\u{0}\(($0.read ?? []).joined(separator: ","))\u{0}\(($0.write ?? []).joined(separator: ","))" }
            ?? principal.subject
        if isView, let cached = publication.cached(for: slot, now: now), let dependencies = cached.dependencies,
           heads.stillHolds(dependencies)
        {
            // The common poll of a view: nothing it was built from changed, so it is the same
            // document — no membership, head or store read, no signature.
            return cached
        } else if isView {
            let (listed, dependencies) = try await viewHeads(of: principal)
            return try await publication.current(
                heads: listed, subject: principal.subject, slot: slot, dependencies: dependencies, store: store, now: now)
        }
        return try await publication.current(heads: publicHeads, subject: nil, slot: "", dependencies: nil, store: store, now: now)
    }

    /// The heads the public index lists: every collection anyone may read (no partition).
    var publicHeads: [CollectionHead] {
        let policy = accessControl.policy
        return heads.all.map(\.head).filter { head in
            CollectionPath(head.name).map { $0.key == nil && policy.isPublicRead($0) } ?? false
        }
    }

    /// `?wait=`: absent, or whole seconds from 1 to ``longestWait``.
    static func waitSeconds(_ text: String?) throws -> Int? {
        guard let text else { return nil }
        guard let seconds = Int(text), (1...longestWait).contains(seconds) else {
            throw APIError(.badRequest, "bad_wait", "wait=\(text) is not a number of seconds from 1 to \(longestWait)")
        }
        return seconds
    }

    /// `?cursor=`: absent (0), or the `DeltaSnap-Cursor` of an earlier answer.
    static func cursor(_ text: String?) throws -> Int64 {
        guard let text else { return 0 }
        guard let cursor = Int64(text), cursor >= 0, cursor < Int64.max else {
            throw APIError(.badRequest, "bad_cursor", "cursor=\(text) is not a DeltaSnap-Cursor this server sent")
        }
        return cursor
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

}

extension APIError {
    static func tooManyWaiters(_ capacity: Int) -> APIError {
        APIError(.serviceUnavailable, "too_many_waiters", "this server holds \(capacity) waiting requests already; retry shortly", headers: [.retryAfter: "1"])
    }
}

extension HTTPField.Name {
    /// Sent back as `?cursor=` by a client waiting on the index.
    static let deltaSnapCursor = HTTPField.Name("DeltaSnap-Cursor")!
}
