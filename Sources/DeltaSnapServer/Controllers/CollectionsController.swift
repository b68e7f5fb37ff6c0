import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird

/// Reads of collections and partitions (docs/PROTOCOL.md §5, §8): the list, the poll
/// endpoint (`304`, a delta or a full body, by the plan ``MemoryAnswers`` makes for every
/// layer), the URLs a shared cache keeps (deltas and snapshots named by their tokens, pages),
/// and a record's history.
///
/// ```swift
/// routes.addRoutes(collections.routes(context: BasicRequestContext.self))
/// ```
struct CollectionsController: GatedController {
    let gate: Gate
    let reviewRouting: ReviewRouting
    let store: any StoreReader
    let heads: HeadCache
    /// The poll's plan, and the delta cache it reads.
    let memory: MemoryAnswers
    let fullBodies: FullBodyCache
    /// The versions clients page through (`…/snapshots/{token}?limit=&after=`).
    let pagedVersions: PagedVersions
    let metrics: ServerMetrics
    let access: AccessPolicy
    /// Collections up to this many records keep their full gzip body in memory.
    let fullBodyCacheMaximumRecords: Int
    var reviewed: [String: ReviewSettings] { reviewRouting.reviewed }
    var deltas: DeltaCache { memory.deltas }

    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.get("/v1/collections") { request, _ in await listCollections(request) }
        routes.head("/v1/collections") { request, _ in Self.headOnly(await listCollections(request)) }
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            routes.on("/v1/collections", method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
        }
        for base in CollectionRoutes.bases {
            routes.get(RouterPath(base)) { request, context in try await getCollection(request, path: try collectionPath(context)) }
            // HEAD: the same status and headers (curl -I), never a body, so nothing is streamed.
            routes.head(RouterPath(base)) { request, context in Self.headOnly(try await getCollection(request, path: try collectionPath(context))) }
            addPublicationRoutes(at: base, to: routes)
            routes.get(RouterPath(base + "/records/:id/history")) { request, context in try await recordHistory(request, context: context) }
            routes.head(RouterPath(base + "/records/:id/history")) { request, context in Self.headOnly(try await recordHistory(request, context: context)) }
            // Known paths with other methods get 405, not 404.
            for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
                routes.on(RouterPath(base), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
                routes.on(RouterPath(base + "/records/:id/history"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
            }
        }
        return routes
    }

    /// `GET /v1/collections`: every collection's head (partitions are listed only in their
    /// readers' views, `GET /v1/index`). A preview token (PROTOCOL.md §13.5) is listed each
    /// reviewed collection's workspace under the collection's name, as `GET {base}` and its
    /// view answer it: the tokens it holds are the workspace's, so the published ones would
    /// tell it nothing about what changed.
    func listCollections(_ request: Request) async -> Response {
        var out = Array(#"{"collections":["#.utf8)
        var listed = 0
        let policy = accessControl.policy
        // A bad token is no error here: it lists what anyone may read. Where everything is
        // public the token matters only for a preview device, so it is read only then.
        let principal = policy.everythingPublic && reviewed.isEmpty ? .anonymous : (try? await accessControl.principal(of: request)) ?? .anonymous
        let previews = principal.claims?.preview == true && !reviewed.isEmpty
        for served in heads.all {
            var head = served.head
            guard let path = CollectionPath(head.name), path.key == nil else { continue }
            // Private collections are listed only to those who may read them.
            if !policy.isPublicRead(path), (try? await accessControl.mayRead(path, as: principal, memberships: gate.memberships)) != true { continue }
            if previews, reviewed[path.name] != nil,
               let workspace = try? await heads.served(ReviewPaths.workspace(of: path.description), store: store) {
                head = workspace.head
            }
            if listed > 0 { out.append(UInt8(ascii: ",")) }
            listed += 1
            CanonicalJSON.write(.object([
                JSONMember("checksum", .string(head.checksum.description)),
                JSONMember("count", .number(String(head.count))),
                JSONMember("lastModified", .string(head.lastModified)),
                JSONMember("name", .string(path.description)),
                JSONMember("token", .string(head.token.description)),
            ]), into: &out)
        }
        out.append(contentsOf: Array("]}\n".utf8))
        // A verified token's list may name private collections, a preview token's states
        // workspaces: that caller's alone. Where everything is public any other list is
        // everyone's, whatever token it was asked with.
        let isPrivate = previews || (!policy.everythingPublic && !principal.isAnonymous)
        let cacheControl = isPrivate ? CacheRule.privateAnswer : CacheRule.revalidate
        return Response(status: .ok, headers: [.contentType: "application/json", .cacheControl: cacheControl], body: .init(byteBuffer: ByteBuffer(bytes: out)))
    }

    /// `GET /v1/collections/{name}`: 304, a delta or a full body (docs/PROTOCOL.md §5.1).
    func getCollection(_ request: Request, path: CollectionPath) async throws -> Response {
        let start = ContinuousClock.now
        let policy = accessControl.policy
        // Every bearer token is checked once anything is private (a bad one is a 401 even on
        // a public collection), as the fast path assumes.
        if !policy.everythingPublic {
            _ = try await authorize(request, path, for: .read)
        }
        let name = try await reviewRouting.previewedName(of: path, for: request) ?? path.description
        guard !policy.isPublicRead(path) || name != path.description else { return try await answerPoll(request, name: name, start: start) }
        var response = try await answerPoll(request, name: name, start: start)
        response.headers[.cacheControl] = CacheRule.privateAnswer
        return response
    }

    /// The answer to a poll of `name` once the caller may read it: 304, a delta or a full body.
    private func answerPoll(_ request: Request, name: String, start: ContinuousClock.Instant) async throws -> Response {
        guard let served = try await heads.served(name, store: store) else { throw APIError.unknownCollection(name) }
        let gzip = DeltaSnapAPI.acceptsGzip(request.headers[values: .acceptEncoding])
        let decision: ServeDecision
        switch memory.planPoll(
            served, ifNoneMatch: request.headers[values: .ifNoneMatch].joinedOrNil, ifModifiedSince: request.headers[.ifModifiedSince], gzip: gzip,
            allowsBody: true)
        {
        case .notModified(let served):
            metrics.countOutcome(.notModified, since: start)
            return Response(status: .notModified, headers: served.validatorHeaders)
        case .cachedDelta(let cached):
            metrics.countOutcome(.delta, since: start)
            metrics.countBytes(cached.body.readableBytes, for: .delta)
            return Response(status: .ok, headers: cached.headers, body: .init(byteBuffer: cached.body))
        case .read(let planned):
            decision = planned
        case .modifiedSince(let seconds):
            let first = try await store.firstVersion(in: name, committedAtOrAfter: seconds)
            decision = ServeDecision.decide(.modifiedSince(seconds), head: served.head) { _ in first }
        }
        switch decision {
        case .notModified:
            metrics.countOutcome(.notModified, since: start)
            return Response(status: .notModified, headers: served.validatorHeaders)
        case .full:
            return try await fullResponse(head: served.head, gzip: gzip, since: start)
        case .delta(let since, let base):
            do {
                return try await deltaResponse(name: name, head: served.head, sinceVersion: since, base: base, gzip: gzip, since: start)
            } catch DeltaUnavailable.belowFloor(let head) {
                // Compacted (or a new epoch) since the decision: tombstones the client needs
                // are gone, so the whole state.
                return try await fullResponse(head: head, gzip: gzip, since: start)
            }
        }
    }

    /// A full body: the cached gzip body of collections up to ``DeltaSnapServerConfiguration/fullBodyCacheMaximumRecords``,
    /// else streamed. With `target` (the cacheable URLs) it must be exactly that token's.
    func fullResponse(head: CollectionHead, gzip: Bool, since start: ContinuousClock.Instant, target: String? = nil) async throws -> Response {
        guard gzip && head.count <= fullBodyCacheMaximumRecords else {
            return try await streamed(name: head.name, sinceVersion: nil, base: nil, gzip: gzip, outcome: .full, since: start, target: target)
        }
        let entry = try await fullBodies.body(for: head, store: store)
        if let target { try requireCurrent(target, head: entry.head) }
        heads.update(entry.head)
        metrics.countOutcome(.full, since: start)
        metrics.countBytes(entry.gzip.readableBytes, for: .full)
        return Response(status: .ok, headers: PollAnswer.bodyHeaders(for: entry.head, gzip: true), body: .init(byteBuffer: entry.gzip))
    }

    /// A delta since `sinceVersion`: from the cache of small deltas, read and cached when it
    /// is small, else streamed. With `target` it must lead exactly to that token. Throws
    /// ``DeltaUnavailable/belowFloor(_:)`` when the read finds the base below the floor: the
    /// caller answers it (a full body at the collection endpoint, a `308` at a delta URL).
    func deltaResponse(
        name: String, head: CollectionHead, sinceVersion: UInt64, base: String, gzip: Bool, since start: ContinuousClock.Instant,
        target: String? = nil
    ) async throws -> Response {
        let key = DeltaCache.Key(head: head, base: base, gzip: gzip)
        if let cached = deltas[key] {
            metrics.countOutcome(.delta, since: start)
            metrics.countBytes(cached.body.readableBytes, for: .delta)
            return Response(status: .ok, headers: cached.headers, body: .init(byteBuffer: cached.body))
        }
        do {
            if let entry = try await smallDelta(name: name, sinceVersion: sinceVersion, base: base, gzip: gzip) {
                if let target { try requireCurrent(target, head: entry.head) }
                // Cached under the head it was read at: a later head is another key.
                deltas.store(entry, for: DeltaCache.Key(head: entry.head, base: base, gzip: gzip))
                metrics.countOutcome(.delta, since: start)
                metrics.countBytes(entry.body.readableBytes, for: .delta)
                return Response(status: .ok, headers: entry.headers, body: .init(byteBuffer: entry.body))
            }
            return try await streamed(name: name, sinceVersion: sinceVersion, base: base, gzip: gzip, outcome: .delta, since: start, target: target)
        } catch let unavailable as DeltaUnavailable {
            // The read transaction saw another state than the heads in memory did.
            if let target { try requireCurrent(target, head: unavailable.head) }
            switch unavailable {
            case .clientIsAhead:
                // A replica behind the client: it keeps its newer state (never an older one).
                metrics.countOutcome(.notModified, since: start)
                return Response(status: .notModified, headers: ServedHead.validatorHeaders(for: unavailable.head))
            case .belowFloor:
                throw unavailable
            }
        }
    }

    /// Why a delta decided from the heads in memory cannot be served from the state the read
    /// transaction sees (another instance compacted, or a replica lags behind the client).
    enum DeltaUnavailable: Error {
        case clientIsAhead(CollectionHead)
        case belowFloor(CollectionHead)

        var head: CollectionHead {
            switch self {
            case .clientIsAhead(let head), .belowFloor(let head): head
            }
        }
    }

    /// A delta read and encoded in full when it is small (at most 1,000 records), so it can be
    /// cached; nil when it is larger and should be streamed instead.
    private func smallDelta(name: String, sinceVersion: UInt64, base: String, gzip: Bool) async throws -> PollAnswer? {
        let streamer = try await openBody(name: name, sinceVersion: sinceVersion, base: base, gzipLevel: gzip ? 6 : nil)
        guard streamer.header.count <= 1000 else {
            await streamer.close()
            return nil
        }
        return PollAnswer(head: streamer.head, body: try await streamer.readAll(), gzip: gzip)
    }

    /// Opens a body on one read transaction. A body can reveal a commit the poll has not
    /// seen yet: its head is installed at once, so the server never answers 304 to a token
    /// older than one it has served.
    private func openBody(name: String, sinceVersion: UInt64?, base: String?, gzipLevel: Int32?) async throws -> BodyStreamer {
        let source = try await store.openRecords(in: name, after: sinceVersion)
        do {
            if let sinceVersion, let base {
                let head = source.head
                if ServerToken(base)?.epoch != head.epoch || sinceVersion < head.floor { throw DeltaUnavailable.belowFloor(head) }
                // Equal is an empty delta (exact for a cacheable URL); ahead would go backwards.
                if sinceVersion > head.version { throw DeltaUnavailable.clientIsAhead(head) }
            }
            let streamer = try BodyStreamer(source: source, base: sinceVersion == nil ? nil : base, gzipLevel: gzipLevel)
            heads.update(streamer.head)
            return streamer
        } catch {
            await source.close()
            throw error
        }
    }

    /// A body streamed from one read transaction. With `target`, it must lead exactly to
    /// that token (the cacheable URLs): a commit that landed meanwhile makes it a 404.
    private func streamed(
        name: String, sinceVersion: UInt64?, base: String?, gzip: Bool, outcome: ServerMetrics.Outcome, since start: ContinuousClock.Instant,
        target: String? = nil
    ) async throws -> Response {
        // Level 1 for bodies compressed per request: a third of level 6's CPU cost.
        let streamer = try await openBody(name: name, sinceVersion: sinceVersion, base: base, gzipLevel: gzip ? 1 : nil)
        if let target {
            do { try requireCurrent(target, head: streamer.head) } catch {
                await streamer.close()
                throw error
            }
        }
        metrics.countOutcome(outcome, since: start)
        let metrics = metrics
        let headers = PollAnswer.bodyHeaders(for: streamer.head, gzip: gzip)
        // From here only the body's writer uses it.
        let handed = HandedOver(streamer)
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            let streamer = handed.value
            do {
                while let chunk = try await streamer.nextChunk() {
                    metrics.countBytes(chunk.readableBytes, for: outcome)
                    try await writer.write(chunk)
                }
                try await writer.finish(nil)
            } catch {
                await streamer.close()
                throw error
            }
        })
    }

    /// `GET /v1/collections/{c}/records/{id}/history[?limit=N]`: the values writes
    /// replaced, newest first.
    func recordHistory(_ request: Request, context: some RequestContext) async throws -> Response {
        let path = try collectionPath(context)
        let name = path.description
        _ = try await authorize(request, path, for: .read)
        guard try await heads.served(name, store: store) != nil else { throw APIError.unknownCollection(name) }
        let id = try recordID(context)
        var limit = 100
        if let text = request.uri.queryParameters.get("limit") {
            guard let number = Int(text), (1...1000).contains(number) else {
                throw APIError(.badRequest, "invalid_limit", "limit must be an integer from 1 to 1000")
            }
            limit = number
        }
        // A reviewed collection's published values change through review only: its history is
        // what publications replaced (pushes' stays with the unpublished workspace).
        let entries = reviewed[path.name] != nil
            ? try await store.reviewHistory(of: id, in: name, limit: limit)
            : try await store.history(of: id, in: name, limit: limit)
        var out = Array(#"{"collection":"#.utf8)
        CanonicalJSON.writeString(name, into: &out)
        out.append(contentsOf: Array(#","history":["#.utf8))
        for (index, entry) in entries.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: Array(#"{"replacedAt":"#.utf8))
            CanonicalJSON.writeString(HTTPDate.format(entry.replacedAt), into: &out)
            out.append(contentsOf: Array(#","replacedBy":"#.utf8))
            CanonicalJSON.writeString(entry.replacedBy, into: &out)
            out.append(contentsOf: Array(#","replacedIn":\#(entry.replacedIn),"value":"#.utf8))
            out.append(contentsOf: entry.value)  // canonical record bytes, as stored
            out.append(contentsOf: Array(#","version":\#(entry.version)}"#.utf8))
        }
        out.append(contentsOf: Array(#"],"id":"#.utf8))
        CanonicalJSON.writeString(id, into: &out)
        out.append(contentsOf: Array("}\n".utf8))
        let cacheControl = accessControl.policy.isPublicRead(path) ? CacheRule.revalidate : CacheRule.privateAnswer
        return Response(status: .ok, headers: [.contentType: "application/json", .cacheControl: cacheControl], body: .init(byteBuffer: ByteBuffer(bytes: out)))
    }
}

extension DeltaSnapAPI {
    /// Whether `Accept-Encoding` allows gzip (RFC 9110 §12.5.3): an explicit `gzip` (or
    /// `x-gzip`) entry decides; `*` applies only when gzip is not named; `q=0` refuses.
    ///
    /// ```swift
    /// DeltaSnapAPI.acceptsGzip(["gzip;q=0, *"])   // false: gzip itself was refused
    /// ```
    package static func acceptsGzip(_ values: [String]) -> Bool {
        if let plain = acceptsGzipWithoutParameters(values) { return plain }
        var named: Bool?
        var wildcard: Bool?
        for value in values {
            for item in value.split(separator: ",") {
                let parts = item.split(separator: ";").map { String($0).trimmingSpaces.lowercased() }
                guard let coding = parts.first else { continue }
                let refused = parts.dropFirst().contains { $0.replacingOccurrences(of: " ", with: "").hasPrefix("q=0") && !$0.contains(where: { "123456789".contains($0) }) }
                switch coding {
                case "gzip", "x-gzip": named = (named ?? false) || !refused
                case "*": wildcard = (wildcard ?? false) || !refused
                default: continue
                }
            }
        }
        return named ?? wildcard ?? false
    }

    /// The common case read straight from the bytes: no `;` (so no `q=`) and no `*`, where
    /// the answer is whether `gzip` or `x-gzip` is listed. Nil leaves it to the full parse.
    /// Every poll asks this; the general parse (splits, lowercased copies) was a tenth of a
    /// cached delta's cost.
    static func acceptsGzipWithoutParameters(_ values: [String]) -> Bool? {
        var found = false
        for value in values {
            let answer: Bool?? = value.utf8.withContiguousStorageIfAvailable { bytes in
                guard !bytes.contains(where: { $0 == UInt8(ascii: ";") || $0 == UInt8(ascii: "*") }) else { return nil }
                return bytes.split(separator: UInt8(ascii: ",")).contains { item in
                    var token = item
                    while let first = token.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { token = token.dropFirst() }
                    while let last = token.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { token = token.dropLast() }
                    // ASCII case folding; no other byte folds onto these letters in a valid value.
                    let folded = token.lazy.map { $0 | 0x20 }
                    return folded.elementsEqual("gzip".utf8) || folded.elementsEqual("x-gzip".utf8)
                }
            }
            guard case .some(.some(let listed)) = answer else { return nil }
            found = found || listed
        }
        return found
    }
}

extension Array where Element == String {
    /// Several header lines of one field joined as one list, or nil when there are none.
    var joinedOrNil: String? { isEmpty ? nil : joined(separator: ", ") }
}
