import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

/// `GET /v1/index`: the public index, a user's view, and the long-poll on either
/// (docs/PROTOCOL.md §8.1, §10, §11) — the router's routes, and the answers memory gives
/// before the router (``MemoryAnswers`` holds this controller for them).
///
/// ```swift
/// let index = IndexController(viewIndex: viewIndex, waiters: waiters)
/// routes.addRoutes(index.routes(context: BasicRequestContext.self))
/// ```
struct IndexController: Controller {
    /// Who sees which document, and whether a client holds it.
    let viewIndex: ViewIndex
    /// The requests held by `GET /v1/index?wait=`, woken by every head change.
    let waiters: IndexWaiters

    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.get("/v1/index") { request, _ in try await index(request) }
        routes.head("/v1/index") { request, _ in Self.headOnly(try await index(request)) }
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            routes.on("/v1/index", method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
        }
        return routes
    }

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
        let caller = try await viewIndex.caller(of: request)
        let query = request.uri.queryParameters
        let wait = try Self.waitSeconds(query.get("wait"))
        let ifNoneMatch = request.headers[values: .ifNoneMatch].joinedOrNil
        let headers = viewIndex.headers(for: caller).fields
        // `*` names no version to wait past: answered at once, as any conditional request.
        let known = (ifNoneMatch ?? query.get("etag")).flatMap { $0.trimmingSpaces == "*" ? nil : $0 }
        guard let wait, let known else {
            let answer = indexAnswer(try await viewIndex.current(for: caller), caller: caller, ifNoneMatch: ifNoneMatch)
            return Response(status: answer.status, headers: answer.headers, body: answer.body.map { .init(byteBuffer: $0) } ?? .init())
        }
        let cursor = try Self.cursor(query.get("cursor"))
        let deadline = ContinuousClock.now + .seconds(wait)
        while true {
            // Read before the answer is built: a change in between wakes the wait below.
            let generation = waiters.generation
            let published = try await viewIndex.current(for: caller)
            let changed = !ViewIndex.holds(known, published)
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
              case .some(let caller) = viewIndex.caller(authorization: request.headerFields[.authorization])
        else { return nil }
        let uri = URI(target)
        guard uri.path == "/v1/index" else { return nil }
        let query = uri.queryParameters
        let ifNoneMatch = request.headerFields[values: .ifNoneMatch].joinedOrNil
        guard let wait = try? Self.waitSeconds(query.get("wait")), let cursor = try? Self.cursor(query.get("cursor")),
              let known = ifNoneMatch ?? query.get("etag"), known.trimmingSpaces != "*"
        else { return nil }
        let generation = waiters.generation
        guard let published = viewIndex.fromMemory(for: caller), ViewIndex.holds(known, published) else { return nil }
        return ParkableWait(
            caller: caller, generation: generation, deadline: .now + .seconds(wait), published: published, viaIfNoneMatch: ifNoneMatch != nil,
            cursor: cursor, headers: viewIndex.headers(for: caller).fields)
    }

    /// `GET /v1/index` (no query) answered from memory: a view or the public index that
    /// nothing it lists has changed since it was built; nil leaves it to the router.
    func indexAnswerFromMemory(_ request: HTTPRequest) -> (status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer?)? {
        guard request.method == .get || request.method == .head, request.path == "/v1/index",
              case .some(let caller) = viewIndex.caller(authorization: request.headerFields[.authorization]), let published = viewIndex.fromMemory(for: caller)
        else { return nil }
        return indexAnswer(published, caller: caller, ifNoneMatch: request.headerFields[values: .ifNoneMatch].joinedOrNil)
    }

    /// `GET /v1/index`'s `304` when memory alone has it — the caller (nil: no
    /// `Authorization`) still holds the document `ifNoneMatch` names — for ``RawPollHandler``,
    /// which writes the head (then the `ETag`) before NIO's HTTP decoder; nil leaves the
    /// request to the decoder and the fast path, which answer everything else (a new
    /// document, an unknown token).
    func indexNotModifiedFromMemory(authorization: String?, ifNoneMatch: String) -> (head: IndexHeaders, etag: String)? {
        guard case .some(let caller) = viewIndex.caller(authorization: authorization), let published = viewIndex.fromMemory(for: caller),
              ViewIndex.holds(ifNoneMatch, published)
        else { return nil }
        return (viewIndex.headers(for: caller), published.etag)
    }

    /// The answer to `GET /v1/index` without a wait, on the router's path and the fast path
    /// alike: `304` when `ifNoneMatch` names `published`, else the document.
    func indexAnswer(
        _ published: IndexPublisher.Published, caller: Principal?, ifNoneMatch: String?
    ) -> (status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer?) {
        var headers = viewIndex.headers(for: caller).fields
        headers[.eTag] = published.etag
        if ViewIndex.holds(ifNoneMatch, published) { return (.notModified, headers, nil) }
        return (.ok, headers, published.document)
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
