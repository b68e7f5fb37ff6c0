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
        let principal = policy.indexIgnoresTokens ? Principal.anonymous : try await accessControl.principal(of: request)
        let isView = !principal.isAnonymous
        let query = request.uri.queryParameters
        let wait = try Self.waitSeconds(query.get("wait"))
        let ifNoneMatch = request.headers[values: .ifNoneMatch].joinedOrNil
        let headers = indexHeaders(isView: isView)
        // `*` names no version to wait past: answered at once, as any conditional request.
        let known = (ifNoneMatch ?? query.get("etag")).flatMap { $0.trimmingSpaces == "*" ? nil : $0 }
        guard let wait, let known else {
            let answer = indexAnswer(try await currentIndex(for: principal, isView: isView), isView: isView, ifNoneMatch: ifNoneMatch)
            return Response(status: answer.status, headers: answer.headers, body: answer.body.map { .init(byteBuffer: $0) } ?? .init())
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
        /// The user whose view it is; nil for the public index.
        var caller: Principal?
        var generation: UInt64
        var deadline: ContinuousClock.Instant
        /// The public index it holds (its `ETag` is the client's).
        var published: IndexPublisher.Published
        var viaIfNoneMatch: Bool
        var cursor: Int64
        var headers: HTTPFields
    }

    /// `GET /v1/index?wait=` whose client holds the current index or view, or nil (the router
    /// answers: a bad parameter or token, an index that changed or must be rebuilt).
    func parkableWait(_ request: HTTPRequest) -> ParkableWait? {
        guard request.method == .get || request.method == .head, let target = request.path, target.hasPrefix("/v1/index?"),
              case .some(let caller) = indexCaller(request)
        else { return nil }
        let uri = URI(target)
        guard uri.path == "/v1/index" else { return nil }
        let query = uri.queryParameters
        let ifNoneMatch = request.headerFields[values: .ifNoneMatch].joinedOrNil
        guard let wait = try? Self.waitSeconds(query.get("wait")), let cursor = try? Self.cursor(query.get("cursor")),
              let known = ifNoneMatch ?? query.get("etag"), known.trimmingSpaces != "*"
        else { return nil }
        let generation = waiters.generation
        guard let published = indexFromMemory(for: caller), ConditionalRequest(ifNoneMatch: known, ifModifiedSince: nil).matches(entityTag: published.etag)
        else { return nil }
        return ParkableWait(
            caller: caller, generation: generation, deadline: .now + .seconds(wait), published: published, viaIfNoneMatch: ifNoneMatch != nil,
            cursor: cursor, headers: indexHeaders(isView: caller != nil))
    }

    /// The index `principal` sees now: built (and signed) only when a head it lists changed.
    func currentIndex(for principal: Principal, isView: Bool) async throws -> IndexPublisher.Published {
        let now = Int64(Date().timeIntervalSince1970)
        guard isView else {
            return try await publication.current(
                key: publicHeads.map(EntryKey.init), subject: nil, slot: "", dependencies: nil, store: store, now: now)
        }
        let slot = Self.slot(of: principal)
        let dependencies: ViewDependencies
        switch keptView(slot: slot, principal: principal, now: now, patching: true) {
        case .current(let published): return published
        case .moved(let moved): dependencies = moved
        case .none: dependencies = try await viewHeads(of: principal)
        }
        return try await publication.current(
            key: dependencies.listedKeys, subject: principal.subject, slot: slot, dependencies: dependencies, store: store, now: now)
    }

    /// Views are kept per subject and claims: another token of the same user may name other
    /// partitions in its claims.
    static func slot(of principal: Principal) -> String {
        principal.claims.map { "\($0.sub.value)\u{0}\(($0.read ?? []).joined(separator: ","))\u{0}\(($0.write ?? []).joined(separator: ","))" }
            ?? principal.subject
    }

    /// What memory has of the view kept under `slot`.
    enum KeptView {
        /// The document: nothing it was built from changed, and it needs no re-signing.
        case current(IndexPublisher.Published)
        /// What it depends on and lists now: some of its heads moved, or its document is due
        /// for re-signing, but what it lists is still decided.
        case moved(ViewDependencies)
        /// Nothing kept, or what the view lists must be decided again.
        case none
    }

    /// The view kept under `slot` for `principal`, as far as memory can tell. Who may read
    /// what depends on names, rules, claims and memberships, never on a token, so while the
    /// caller's memberships partition did not move and no head appeared or left, the view
    /// lists the same collections and partitions, each at its new head: a changed view of a
    /// thousand partitions is decided without a pass over the rules, and with no read.
    /// Without `patching` (the fast path, which only answers what is current), a view that
    /// changed is `.none` at once.
    func keptView(slot: String, principal: Principal, now: Int64, patching: Bool) -> KeptView {
        guard let kept = publication.kept(for: slot), var dependencies = kept.dependencies else { return .none }
        let fresh = publication.isFresh(kept, now: now)
        switch heads.standing(of: dependencies) {
        case .changed:
            return .none
        case .holds(let at):
            // Checked in full: the next poll compares one number until another head changes.
            if at != dependencies.heldAt { publication.noteStillHolds(slot: slot, at: at) }
            if fresh { return .current(kept) }
            guard patching else { return .none }
            dependencies.heldAt = at
            return .moved(dependencies)
        case .moved(let moved, let at):
            guard patching else { return .none }
            let membershipsPartition = memberships.partition(of: principal.subject)?.description
            for (position, head) in moved {
                guard dependencies.heads[position].name != membershipsPartition else { return .none }
                dependencies.heads[position].token = head.token
                dependencies.heads[position].floor = head.floor
            }
            dependencies.heldAt = at
            return .moved(dependencies)
        }
    }

    /// The common poll of a view: nothing it was built from changed, so it is the document
    /// kept under `slot` — no membership, head or store read, no signature.
    func viewFromMemory(slot: String, principal: Principal, now: Int64) -> IndexPublisher.Published? {
        guard case .current(let published) = keptView(slot: slot, principal: principal, now: now, patching: false) else { return nil }
        return published
    }

    /// The index `principal` sees now when memory alone has it (nil: the public index),
    /// without waiting: the fast path answers and parks requests on it.
    func indexFromMemory(for principal: Principal?) -> IndexPublisher.Published? {
        let now = Int64(Date().timeIntervalSince1970)
        guard let principal else { return publication.freshPublic(heads: publicHeads, now: now) }
        return viewFromMemory(slot: Self.slot(of: principal), principal: principal, now: now)
    }

    /// Who a request to `/v1/index` on the fast path is: nil for the public index, the user
    /// for a view; `.none` when memory cannot tell (an unknown or bad token: the router decides).
    func indexCaller(_ request: HTTPRequest) -> Principal?? {
        indexCaller(authorization: request.headerFields[.authorization])
    }

    /// ``indexCaller(_:)`` for a request's `Authorization` value (nil: none was sent).
    func indexCaller(authorization header: String?) -> Principal?? {
        let policy = accessControl.policy
        if policy.indexIgnoresTokens { return .some(nil) }
        guard let header else { return .some(nil) }
        guard let token = AccessControl.bearerToken(header), let principal = accessControl.knownPrincipal(token) else { return .none }
        let isView = !principal.isAnonymous
        return .some(isView ? principal : nil)
    }

    /// `GET /v1/index` (no query) answered from memory: a view or the public index that
    /// nothing it lists has changed since it was built; nil leaves it to the router.
    func indexAnswerFromMemory(_ request: HTTPRequest) -> (status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer?)? {
        guard request.method == .get || request.method == .head, request.path == "/v1/index",
              case .some(let caller) = indexCaller(request), let published = indexFromMemory(for: caller)
        else { return nil }
        return indexAnswer(published, isView: caller != nil, ifNoneMatch: request.headerFields[values: .ifNoneMatch].joinedOrNil)
    }

    /// `GET /v1/index`'s `304` when memory alone has it — the caller (nil: no
    /// `Authorization`) still holds the document `ifNoneMatch` names — for ``RawPollHandler``,
    /// which writes the head (then the `ETag`) before NIO's HTTP decoder; nil leaves the
    /// request to the decoder and the fast path, which answer everything else (a new
    /// document, an unknown token).
    func indexNotModifiedFromMemory(authorization: String?, ifNoneMatch: String) -> (head: IndexHeaders, etag: String)? {
        guard case .some(let caller) = indexCaller(authorization: authorization), let published = indexFromMemory(for: caller),
              ifNoneMatch == published.etag || ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: nil).matches(entityTag: published.etag)
        else { return nil }
        return (caller != nil ? viewIndexHeaders : publicIndexHeaders, published.etag)
    }

    /// The answer to `GET /v1/index` without a wait, on the router's path and the fast path
    /// alike: `304` when `ifNoneMatch` names `published`, else the document.
    func indexAnswer(
        _ published: IndexPublisher.Published, isView: Bool, ifNoneMatch: String?
    ) -> (status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer?) {
        var headers = indexHeaders(isView: isView)
        headers[.eTag] = published.etag
        if ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: nil).matches(entityTag: published.etag) {
            return (.notModified, headers, nil)
        }
        return (.ok, headers, published.document)
    }

    /// `Content-Type` and `Cache-Control` of every index answer (``IndexHeaders``).
    func indexHeaders(isView: Bool) -> HTTPFields {
        (isView ? viewIndexHeaders : publicIndexHeaders).fields
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
    func viewHeads(of principal: Principal) async throws -> ViewDependencies {
        // Taken before any head is read: a change while the view is built is seen by the next poll.
        let heldAt = heads.changes
        let collections = heads.all
        var dependencies = ViewDependencies(heads: [], collectionCount: collections.count, heldAt: heldAt)
        var listedCollections: [Int] = []
        for served in collections {
            dependencies.heads.append((served.head.name, served.head.token, served.head.floor))
            guard let path = CollectionPath(served.head.name) else { continue }
            if try await accessControl.mayRead(path, as: principal, memberships: memberships) { listedCollections.append(dependencies.heads.count - 1) }
        }
        var listedPartitions: [Int] = []
        var candidates = Set<String>()
        // Read once for every candidate below, not once per candidate.
        let roles = principal.claims == nil ? [:] : try await memberships.roles(of: principal.subject)
        if let claims = principal.claims {
            for (name, rule) in accessControl.policy.rules.collections where rule.partitioned {
                if let own = CollectionPath(name: name, key: principal.subject) { candidates.insert(own.description) }
            }
            candidates.formUnion(roles.keys)
            candidates.formUnion(((claims.read ?? []) + (claims.write ?? [])).filter(CollectionPath.isPartition))
        }
        for name in candidates.sorted(by: { $0.utf8Precedes($1) }) {
            let head = try await heads.head(of: name, store: store)
            dependencies.heads.append((name, head?.token, head?.floor ?? 0))
            guard head != nil, let path = CollectionPath(name), try await accessControl.mayRead(path, as: principal, memberships: memberships, roles: roles)
            else { continue }
            listedPartitions.append(dependencies.heads.count - 1)
        }
        // Both lists are in name order already: merged, not sorted again.
        let looked = dependencies.heads
        dependencies.listed = Self.merged(listedCollections, listedPartitions) { looked[$0].name }
        return dependencies
    }

    /// Two lists in name order (UTF-8), as one.
    static func merged<T>(_ a: [T], _ b: [T], name: (T) -> String) -> [T] {
        var out: [T] = []
        out.reserveCapacity(a.count + b.count)
        var (i, j) = (0, 0)
        while i < a.count && j < b.count {
            if name(b[j]).utf8Precedes(name(a[i])) {
                out.append(b[j])
                j += 1
            } else {
                out.append(a[i])
                i += 1
            }
        }
        out += a[i...]
        out += b[j...]
        return out
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
