import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// The operator's console (`serve --console`): its page at `/console/` (clients/console,
/// embedded in ``ConsoleAssets``) and the admin-only JSON it reads under `/v1/console/` —
/// what no other endpoint tells: health and caches, a search among the partitions, a record
/// by id, recent pushes. Everything else the page shows comes from the public API (the
/// collections' list, paged snapshots, history, the review endpoints), with the admin token.
///
/// ```swift
/// routes.addRoutes(console.routes(context: BasicRequestContext.self))
/// ```
struct ConsoleController: GatedController {
    let gate: Gate
    let store: any StoreReader & FollowerPositions
    let heads: HeadCache
    let deltas: DeltaCache
    let fullBodies: FullBodyCache
    let waiters: IndexWaiters
    let recentPushes: RecentPushes
    let consoleSizes: ConsoleSizes

    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let router = RouteCollection(context: Context.self)
        // `/console` and `/console/` are one route; the page names its files by absolute paths.
        router.get("/console") { _, _ in Self.consoleAsset(ConsoleAssets.html, type: "text/html; charset=utf-8") }
        router.get("/console/console.js") { _, _ in Self.consoleAsset(ConsoleAssets.script, type: "text/javascript; charset=utf-8") }
        router.get("/console/console.css") { _, _ in Self.consoleAsset(ConsoleAssets.style, type: "text/css; charset=utf-8") }
        // Every JSON route is the operator's alone.
        func admin(_ path: RouterPath, _ answer: @escaping @Sendable (Request) async throws -> Response) {
            router.get(path) { request, _ in
                try gate.requireAdmin(request, for: "the console")
                return try await answer(request)
            }
        }
        admin("/v1/console/overview") { _ in try await consoleOverview() }
        admin("/v1/console/partitions") { try await consolePartitions($0) }
        admin("/v1/console/record") { try await consoleRecord($0) }
        admin("/v1/console/records") { try await consoleRecords($0) }
        admin("/v1/console/sizes") { try await consoleSizes($0) }
        admin("/v1/console/pushes") { _ in Self.privateJSON(.object([JSONMember("pushes", .array(recentPushes.all.map(\.json)))])) }
        return router
    }

    /// Health (the store answers, waiters, caches), each reviewed collection's rule and pending
    /// request, and the queue of requests waiting for a decision (partitions included).
    private func consoleOverview() async throws -> Response {
        var reachable = true
        var problem: String?
        do { _ = try await store.collections() } catch {
            reachable = false
            problem = "\(error)"
        }
        var reviews: [JSONValue] = []
        for (name, settings) in accessControl.policy.rules.collections.compactMapValues(\.review).sorted(by: { $0.key < $1.key }) {
            let partitioned = accessControl.policy.rules[name]?.partitioned == true
            // A partitioned collection's reviews are per partition (millions): the page asks for one.
            let pending = partitioned || !reachable ? nil : try? await store.reviewState(of: name).pending
            reviews.append(.object([
                JSONMember("collection", .string(name)), JSONMember("editors", .string(settings.editors)),
                JSONMember("partitioned", .bool(partitioned)), JSONMember("pending", pending?.json ?? .null),
                JSONMember("reviewers", .string(settings.reviewers)),
            ]))
        }
        // Every request waiting for a decision, partitions' included (a queue the steps keep).
        let queue: [JSONValue] = (reachable ? (try? await store.pendingReviews(after: nil, limit: 200)) ?? [] : []).map {
            .object([JSONMember("path", .string($0.path)), JSONMember("request", $0.request.json)])
        }
        // A follower records its position with each publication: how long ago its last one was.
        let now = Int64(Date().timeIntervalSince1970)
        let followers: [JSONValue] = ((try? await store.followers()) ?? []).map { follower in
            var members = [
                JSONMember("lastPublished", .string(HTTPDate.format(follower.recordedAt))), JSONMember("name", .string(follower.follower)),
                JSONMember("secondsAgo", .number(String(max(0, now - follower.recordedAt)))),
            ]
            if let bytes = follower.lagBytes, let at = follower.lagMeasuredAt {
                members.append(JSONMember("lagBytes", .number(String(bytes))))
                members.append(JSONMember("lagMeasuredSecondsAgo", .number(String(max(0, now - at)))))
            }
            return .object(members)
        }
        var storeMembers = [JSONMember("reachable", .bool(reachable))]
        if let problem { storeMembers.append(JSONMember("problem", .string(problem))) }
        let partitioned = accessControl.policy.rules.collections.filter { $0.value.partitioned }.keys.sorted().map(JSONValue.string)
        return Self.privateJSON(.object([
            JSONMember("caches", .object([
                JSONMember("deltas", .number(String(deltas.count))), JSONMember("fullBodyBytes", .number(String(fullBodies.keptBytes))),
                JSONMember("heads", .number(String(heads.all.count))),
            ])),
            JSONMember("followers", .array(followers)),
            JSONMember("partitioned", .array(partitioned)),
            JSONMember("queue", .array(queue)),
            JSONMember("reviews", .array(reviews)),
            JSONMember("store", .object(storeMembers)),
            JSONMember("waiters", .number(String(waiters.count))),
        ]))
    }

    /// `?collection=NAME&prefix=P&limit=N`: the partitions whose key starts with `P`, with their heads.
    private func consolePartitions(_ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        guard let name = query.get("collection").map({ String($0) }), CollectionName.isValid(name), !ReviewPaths.isReserved(name) else {
            throw APIError(.badRequest, "bad_collection_name", "collection must be a collection name")
        }
        let prefix = query.get("prefix").map { String($0) } ?? ""
        let limit = min(200, max(1, query.get("limit").flatMap { Int($0) } ?? 50))
        var listed: [JSONValue] = []
        for path in try await store.partitions(of: name, keysStartingWith: prefix, limit: limit) {
            guard let head = try await heads.head(of: path, store: store) else { continue }
            listed.append(Self.headJSON(head))
        }
        return Self.privateJSON(.object([JSONMember("collection", .string(name)), JSONMember("partitions", .array(listed))]))
    }

    /// `?collection=PATH&collection=…` (at most 50): the bytes of each one's visible records —
    /// their canonical JSON, what a client stores — at its head. Counted by reading them once
    /// per version (a store keeps no running total), then kept (``ConsoleSizes``).
    private func consoleSizes(_ request: Request) async throws -> Response {
        let paths = request.uri.queryParameters.getAll("collection").map { String($0) }
        guard !paths.isEmpty, paths.count <= 50, paths.allSatisfy({ CollectionPath($0) != nil && !ReviewPaths.isReserved($0) }) else {
            throw APIError(.badRequest, "bad_collection_name", "collection must be NAME or NAME/KEY, given 1 to 50 times")
        }
        var sizes: [JSONValue] = []
        for path in paths {
            guard let head = try await heads.head(of: path, store: store) else { continue }
            var counted = (bytes: UInt64(0), version: head.version)
            if let known = consoleSizes.bytes(of: head) {
                counted.bytes = known
            } else {
                counted = try await store.withRecords(in: path) { source in
                    var total: UInt64 = 0
                    while try await source.next({ total += UInt64($0.count) }) {}
                    consoleSizes.keep(total, for: source.head)
                    return (total, source.head.version)
                }
            }
            sizes.append(.object([
                JSONMember("bytes", .number(String(counted.bytes))), JSONMember("name", .string(path)),
                JSONMember("version", .number(String(counted.version))),
            ]))
        }
        return Self.privateJSON(.object([JSONMember("sizes", .array(sizes))]))
    }

    /// `?collection=PATH&id=ID`: the visible record, or null.
    private func consoleRecord(_ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        guard let path = query.get("collection").map({ String($0) }), CollectionPath(path) != nil, !ReviewPaths.isReserved(path) else {
            throw APIError(.badRequest, "bad_collection_name", "collection must be NAME or NAME/KEY")
        }
        guard let id = query.get("id").map({ String($0) }), !id.isEmpty else { throw APIError(.badRequest, "invalid_record", "id is required") }
        let record = try await store.record(id, in: path)
        let value = try record.map { try JSONReader(bytes: $0.bytes).readValue() } ?? .null
        return Self.privateJSON(.object([JSONMember("collection", .string(path)), JSONMember("record", value)]))
    }

    /// `?collection=PATH&after=ID&limit=N`: a page of the head's records, by id.
    private func consoleRecords(_ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        guard let path = query.get("collection").map({ String($0) }), CollectionPath(path) != nil, !ReviewPaths.isReserved(path) else {
            throw APIError(.badRequest, "bad_collection_name", "collection must be NAME or NAME/KEY")
        }
        guard let head = try await heads.head(of: path, store: store) else { throw APIError.unknownCollection(path) }
        let limit = min(500, max(1, query.get("limit").flatMap { Int($0) } ?? 50))
        let records = try await store.withPage(of: path, after: query.get("after").map { String($0) }, limit: limit) { source in
            var records: [JSONValue] = []
            while try await source.next({ records.append(try JSONReader(bytes: Array($0)).readValue()) }) {}
            return records
        }
        let versions: [JSONValue] = try await store.versions(of: path, limit: 20).map {
            .object([JSONMember("committedAt", .string(HTTPDate.format($0.committedAt))), JSONMember("version", .number(String($0.version)))])
        }
        return Self.privateJSON(.object([JSONMember("head", Self.headJSON(head)), JSONMember("records", .array(records)), JSONMember("versions", .array(versions))]))
    }

    static func headJSON(_ head: CollectionHead) -> JSONValue {
        .object([
            JSONMember("count", .number(String(head.count))), JSONMember("floor", .number(String(head.floor))),
            JSONMember("lastModified", .string(head.lastModified)), JSONMember("name", .string(head.name)),
            JSONMember("token", .string(head.token.description)), JSONMember("version", .number(String(head.version))),
        ])
    }

    /// A file of the page, with the policy that keeps anything but its own files out.
    static func consoleAsset(_ text: String, type: String) -> Response {
        var headers: HTTPFields = [.contentType: type, .cacheControl: "no-cache"]
        headers[HTTPField.Name("Content-Security-Policy")!] = ConsoleAssets.contentSecurityPolicy
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}

/// The console's byte counts, by collection or partition and the head they were counted at.
final class ConsoleSizes: Sendable {
    private let counted = NIOLockedValueBox<[String: (token: ServerToken, bytes: UInt64)]>([:])
    /// Counts kept at most; past it they are all dropped and counted again when asked (a
    /// console asks about a page of names at a time).
    static let capacity = 10_000

    func bytes(of head: CollectionHead) -> UInt64? {
        counted.withLockedValue { known in known[head.name].flatMap { $0.token == head.token ? $0.bytes : nil } }
    }

    func keep(_ bytes: UInt64, for head: CollectionHead) {
        counted.withLockedValue { known in
            if known.count >= Self.capacity { known.removeAll(keepingCapacity: true) }
            known[head.name] = (head.token, bytes)
        }
    }
}

/// The last pushes this server answered, for the console: who, where, what was refused or copied.
final class RecentPushes: Sendable {
    struct Push: Sendable {
        var at: Int64
        var collection: String
        var user: String
        var client: String
        var accepted: Int
        var refused: [(seq: UInt64, id: String, error: String, message: String)]
        var copies: [(id: String, copy: String)]

        var json: JSONValue {
            .object([
                JSONMember("accepted", .number(String(accepted))), JSONMember("at", .number(String(at))), JSONMember("client", .string(client)),
                JSONMember("collection", .string(collection)),
                JSONMember("copies", .array(copies.map { .object([JSONMember("copy", .string($0.copy)), JSONMember("id", .string($0.id))]) })),
                JSONMember("refused", .array(refused.map {
                    .object([JSONMember("error", .string($0.error)), JSONMember("id", .string($0.id)), JSONMember("message", .string($0.message)),
                             JSONMember("seq", .number(String($0.seq)))])
                })),
                JSONMember("user", .string(user)),
            ])
        }
    }

    private let pushes = NIOLockedValueBox<[Push]>([])
    static let capacity = 200

    func record(_ push: Push) {
        pushes.withLockedValue { list in
            list.append(push)
            if list.count > Self.capacity { list.removeFirst(list.count - Self.capacity) }
        }
    }

    /// Newest first.
    var all: [Push] { pushes.withLockedValue { $0.reversed() } }
}
