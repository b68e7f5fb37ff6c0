import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// Settings of a DeltaSnap server (the store it serves is given next to them).
public struct DeltaSnapServerConfiguration: Sendable {
    /// The bearer token the write API requires; `nil` disables writes (403).
    public var writeToken: String?
    /// The largest write body accepted (413 above).
    public var maximumWriteBodyBytes: Int
    /// Collections up to this many records keep their full gzip body in memory, built once
    /// per version; larger ones are streamed from SQLite so memory stays bounded.
    public var fullBodyCacheMaximumRecords: Int
    /// How often to look for commits made by other processes (`deltasnap import`, a
    /// `deltasnap follow` publishing a source's commits): on SQLite one `data_version` read,
    /// so often enough that a live client is not kept waiting by it.
    public var changePollInterval: Duration
    /// Per-user JWTs and private collections; its admin token is ``writeToken``.
    public var access: AccessPolicy
    /// The largest push body accepted (413 above): a batch is a few hundred writes.
    public var maximumPushBodyBytes: Int
    /// How long push results and replaced values (history) are kept.
    public var pushRetention: PushRetention
    /// Collections merged by ``MergePolicy/fork``: a pushed write whose record changed on
    /// the server since its `base` becomes a conflict copy; the others merge per field.
    public var forkCollections: Set<String>
    /// Whether the one-line request log includes `304 Not Modified` answers (most of the
    /// traffic, and no news); every other answer is logged at `info`.
    public var logNotModified: Bool
    /// Compaction run by the server on a schedule; nil leaves it to `deltasnap compact`.
    public var compaction: CompactionSchedule?
    /// Keys that sign `GET /v1/index` (several while a key is rotated); empty: the index
    /// is served unsigned, still telling which collections changed.
    public var signingKeys: [IndexSigningKey]
    /// Seconds a shared cache may serve the index without asking (`max-age`).
    public var indexMaxAge: Int
    /// Seconds from signing until an index expires; it is re-signed well before.
    public var indexLifetime: Int
    /// Where the `request` line of each answer is written, formatted straight into the
    /// buffer (`deltasnap serve` passes its ``BufferedLogOutput``); nil sends it through the
    /// server's swift-log `Logger` like every other line.
    public var requestLogOutput: BufferedLogOutput?
    /// How many partitions' heads are kept in memory (the ones in use): a store may hold
    /// millions, read one by one on demand; every collection's head is always kept.
    public var partitionHeadCapacity = 100_000
    /// Requests `GET /v1/index?wait=` may hold at once; one more is answered `503` with
    /// `Retry-After`.
    public var maximumWaiters = 10_000
    /// Bytes of versions kept while clients page through them (docs/PROTOCOL.md §8.6); a
    /// larger version is paged from the store, one page at a time, while it is the head.
    public var pagingBudgetBytes = 64 << 20
    /// The largest attachment accepted (`413` above; `Upload-Limit: max-size`).
    public var maximumAttachmentBytes: UInt64 = 1 << 30
    /// Seconds an unfinished resumable upload is kept from its start.
    public var uploadLifetime: Int64 = 24 * 3600
    /// Commits closer together than this wake a waiting request once (the first at once,
    /// the rest at the end of the interval).
    public var waitDebounce: Duration = .milliseconds(50)
    /// Serve the operator's console at `/console/` and its admin-only JSON at `/v1/console/`.
    public var console = false
    /// Timeouts and the connection cap of ``DeltaSnapAPI/httpServer(logger:)`` (by default
    /// derived from the process's open-file limit when the service is made).
    public var connections = ConnectionLimits.forThisProcess()

    public init(
        writeToken: String? = nil, maximumWriteBodyBytes: Int = 32 * 1024 * 1024,
        fullBodyCacheMaximumRecords: Int = 100_000, changePollInterval: Duration = .milliseconds(20),
        access: AccessPolicy = AccessPolicy(), maximumPushBodyBytes: Int = 1024 * 1024, pushRetention: PushRetention = PushRetention(),
        logNotModified: Bool = false, compaction: CompactionSchedule? = nil,
        signingKeys: [IndexSigningKey] = [], indexMaxAge: Int = 30, indexLifetime: Int = 24 * 3600,
        requestLogOutput: BufferedLogOutput? = nil, forkCollections: Set<String> = []
    ) {
        self.requestLogOutput = requestLogOutput
        self.forkCollections = forkCollections
        self.writeToken = writeToken
        self.maximumWriteBodyBytes = maximumWriteBodyBytes
        self.fullBodyCacheMaximumRecords = fullBodyCacheMaximumRecords
        self.changePollInterval = changePollInterval
        self.access = access
        self.maximumPushBodyBytes = maximumPushBodyBytes
        self.pushRetention = pushRetention
        self.logNotModified = logNotModified
        self.compaction = compaction
        self.signingKeys = signingKeys
        self.indexMaxAge = max(1, indexMaxAge)
        self.indexLifetime = max(60, indexLifetime)
    }
}

/// The DeltaSnap endpoints and their state (heads in memory, cached full bodies) on any
/// ``DeltaSnapStore/CollectionStore``. Mount them in your own Hummingbird app with
/// ``addRoutes(to:)``.
///
/// ```swift
/// let store = try SQLiteCollectionStore(path: "deltasnap.sqlite")
/// let service = try await DeltaSnapAPI(store: store)
/// let router = Router()
/// service.addRoutes(to: router)            // next to your own routes
/// let app = Application(router: router)
/// async let watching: Void = service.watchForChanges()   // picks up other processes' imports
/// try await app.runService()
/// ```
public final class DeltaSnapAPI: Sendable {
    public let configuration: DeltaSnapServerConfiguration
    public let metrics = ServerMetrics()
    /// Connections open, shed and timed out (``ConnectionGovernor``), on the same registry.
    let connectionMetrics: ConnectionMetrics
    /// Connections open now, across the servers built by ``httpServer(logger:)``.
    let openConnections: ConnectionCount
    let heads: HeadCache
    /// Owned: ``shutdown()`` closes it.
    let store: any CollectionStore
    /// `store` as a keeper of one file per blob (the embedded default), cast once: a cast to
    /// a protocol existential on every download was a measurable part of a small one's CPU.
    let attachmentFiles: (any AttachmentFiles)?
    let fullBodies = FullBodyCache()
    var deltas: DeltaCache { memory.deltas }
    /// What is answered before the router, from memory (the one thing its handlers hold).
    let memory: MemoryAnswers
    let accessControl: AccessControl
    /// `GET /v1/index`: its routes, and its answers from memory.
    let index: IndexController
    var viewIndex: ViewIndex { index.viewIndex }
    var waiters: IndexWaiters { index.waiters }
    let memberships: MembershipDirectory
    /// The versions clients page through (`…/snapshots/{token}?limit=&after=`).
    let pagedVersions: PagedVersions
    /// Resumable uploads a request is appending to now.
    let activeUploads = ActiveUploads()
    /// Attachments served lately: references, and small blobs whole.
    let attachmentMemory: AttachmentMemory
    /// The last pushes answered, for the console.
    let recentPushes = RecentPushes()
    let consoleSizes = ConsoleSizes()
    /// The reviewed collections' settings, by name (read once from the rules: every write and
    /// push asks). Their polls are never answered from memory, where a preview device's token
    /// would not be looked at.
    let reviewed: [String: ReviewSettings]
    /// Who may do what (every controller holds it).
    let gate: Gate
    let operations: OperationsController
    let console: ConsoleController
    let review: ReviewController
    /// Where a reviewed collection's reads and writes go.
    let reviewRouting: ReviewRouting
    let attachments: AttachmentsController

    /// A service on `store`, which it owns from now on (``shutdown()`` closes it; so does a
    /// failed init).
    public init(store: any CollectionStore, configuration: DeltaSnapServerConfiguration = DeltaSnapServerConfiguration()) async throws {
        self.configuration = configuration
        let openConnections = ConnectionCount()
        self.openConnections = openConnections
        let cap = configuration.connections.maximumConnections
        attachmentMemory = AttachmentMemory(
            transferDescriptors: configuration.connections.transferDescriptors, roomToKeep: { cap - openConnections.value })
        connectionMetrics = ConnectionMetrics(factory: metrics.factory)
        reviewed = configuration.access.rules.reviewed
        var policy = configuration.access
        policy.adminToken = configuration.writeToken ?? policy.adminToken
        let waiters = IndexWaiters(debounce: configuration.waitDebounce, capacity: configuration.maximumWaiters)
        do {
            accessControl = try AccessControl(policy: policy, metrics: TokenMetrics(factory: metrics.factory))
            heads = HeadCache(
                try await store.collections(), partitionCapacity: configuration.partitionHeadCapacity, onChange: { [waiters] in waiters.changed() })
        } catch {
            await store.close()
            throw error
        }
        self.store = store
        attachmentFiles = store as? any AttachmentFiles
        pagedVersions = PagedVersions(budgetBytes: configuration.pagingBudgetBytes)
        memberships = MembershipDirectory(collection: policy.rules.memberships, store: store, heads: heads)
        do {
            // Every writer — this server, `deltasnap import`, a follower — reads them from the store.
            let held = try await store.reviewSettings()
            if !reviewed.isEmpty || !held.isEmpty { try await store.setReviewSettings(reviewed) }
        } catch {
            await store.close()
            throw error
        }
        let viewIndex = ViewIndex(
            publication: IndexPublisher(keys: configuration.signingKeys, lifetime: Int64(configuration.indexLifetime)), heads: heads,
            accessControl: accessControl, memberships: memberships, store: store, maxAge: configuration.indexMaxAge)
        index = IndexController(viewIndex: viewIndex, waiters: waiters)
        memory = MemoryAnswers(
            configuration: configuration, metrics: metrics, accessControl: accessControl, heads: heads, deltas: DeltaCache(),
            attachmentMemory: attachmentMemory, attachmentFiles: attachmentFiles, index: index)
        gate = Gate(accessControl: accessControl, memberships: memberships)
        operations = OperationsController(gate: gate, metrics: metrics)
        console = ConsoleController(
            gate: gate, store: store, heads: heads, deltas: memory.deltas, fullBodies: fullBodies, waiters: waiters, recentPushes: recentPushes,
            consoleSizes: consoleSizes)
        review = ReviewController(gate: gate, store: store, heads: heads)
        reviewRouting = ReviewRouting(gate: gate, store: store, heads: heads, reviewed: reviewed)
        attachments = AttachmentsController(
            gate: gate, reviewRouting: reviewRouting, store: store, attachmentFiles: attachmentFiles, attachmentMemory: attachmentMemory, activeUploads: activeUploads, metrics: metrics,
            connectionMetrics: connectionMetrics, access: configuration.access, maximumAttachmentBytes: configuration.maximumAttachmentBytes,
            uploadLifetime: configuration.uploadLifetime)
    }

    /// The collection or partition a route's path names (`:name`, and `:key` on the
    /// partition routes). Their characters never need percent-encoding, but a client that
    /// encodes them anyway (`%3A` for `:`) names the same partition: each part is decoded,
    /// then checked. An invalid one is `400` for every caller alike: it is syntax, and says
    /// nothing of what exists.
    func collectionPath(_ context: some RequestContext) throws -> CollectionPath {
        try RequestTarget.collectionPath(name: try context.parameters.require("name"), key: context.parameters.get("key"))
    }

    /// Where a write to `path` goes: a reviewed collection's workspace, else `path` itself.
    func writeTarget(_ path: String) async throws -> String {
        try await reviewRouting.writeTarget(path)
    }

    /// The principal `request` acts as, once it may exercise `right` on `path`.
    func authorize(_ request: Request, _ path: CollectionPath, for right: AccessControl.Right) async throws -> Principal {
        try await gate.authorize(request, path, for: right)
    }

    /// Picks up commits made by other processes or instances; runs until cancelled.
    public func watchForChanges() async {
        await store.watchForChanges(every: configuration.changePollInterval) { [heads] fresh in heads.replace(with: fresh) }
    }

    /// Answers every request waiting on `GET /v1/index?wait=` now, and every later one at
    /// once: the first step of a graceful shutdown, so held requests do not delay it.
    public func releaseWaiters() {
        waiters.close()
    }

    /// Closes the store's connections (after the server stopped).
    public func shutdown() async {
        await store.close()
    }

    /// The HTTP/1.1 server `deltasnap serve` runs — polls answered from raw bytes before the
    /// HTTP decoder (``RawPollHandler``), the fast path and the JSON error of a request the
    /// parser refuses, then the router — for an app that mounts DeltaSnap's routes in its own
    /// Hummingbird `Application`: it then answers exactly as `serve` does. (Without it every
    /// answer is still right, only slower.)
    ///
    /// ```swift
    /// let router = Router()
    /// router.addRoutes(api.routes())
    /// let app = Application(router: router, server: api.httpServer(logger: logger))
    /// ```
    public func httpServer(logger: Logger = Logger(label: "deltasnap")) -> HTTPServerBuilder {
        let governor = connectionGovernor(logger: logger)
        return HTTPServerBuilder { [self] responder in
            PollingHTTP1Channel(
                http1: HTTP1Channel(
                    responder: InformationalResponder.wrapping(responder, limit: { self.attachments.uploadLimit(version: $0) }, logger: logger),
                    configuration: .init(additionalChannelHandlers: self.channelHandlers(logger: logger))),
                answers: self.memory, governor: governor, requestLogger: logger)
        }
    }

    /// The cap and timeouts of one server's connections; kept attachment descriptors share
    /// their budget and give way first.
    func connectionGovernor(logger: Logger) -> ConnectionGovernor {
        ConnectionGovernor(
            limits: configuration.connections, metrics: connectionMetrics, logger: logger, open: openConnections,
            keptFiles: { [attachmentMemory] in attachmentMemory.keptFileCount },
            releaseKeptFiles: { [attachmentMemory] count in attachmentMemory.releaseKeptFiles(count) })
    }

    /// The handlers between Hummingbird's HTTP codec and its router: polls answered from
    /// memory (a current token's `304`, a cached delta), and the JSON error body for a
    /// request the HTTP parser refuses.
    func channelHandlers(logger: Logger) -> [any RemovableChannelHandler] {
        [
            RequestBoundaryHandler(), FastPathHandler(answers: memory, logger: logger),
            // Last: what passes it needs the router, and so Hummingbird's connection task.
            RouterGate(),
        ]
    }

    /// Every DeltaSnap route (collections, writes, `/v1/index`, `/healthz`, `/metrics`) as a
    /// collection whose middleware — JSON error bodies, metrics, the request id and log line —
    /// wraps only these routes: the host app's own routes and its 404s stay its own.
    ///
    /// ```swift
    /// let router = Router()
    /// router.get("/hello") { _, _ in "hi" }
    /// router.addRoutes(api.routes())
    /// ```
    public func routes<Context: RequestContext>(context: Context.Type = BasicRequestContext.self) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.add(middleware: errorMiddleware())
        register(on: routes)
        return routes
    }

    /// Mounts ``routes(context:)`` in `router`, next to its own routes.
    public func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.addRoutes(routes(context: Context.self))
    }

    /// The middleware that answers every error as JSON, counts each answer and logs it.
    func errorMiddleware<Context: RequestContext>() -> ErrorAndMetricsMiddleware<Context> {
        ErrorAndMetricsMiddleware<Context>(
            metrics: metrics, logNotModified: configuration.logNotModified, requestLogOutput: configuration.requestLogOutput)
    }

    /// Adds every route, without middleware, to `router`.
    func register<Routes: RouterMethods>(on router: Routes) {
        router.addRoutes(operations.routes(context: Routes.Context.self))
        router.get("/v1/collections") { [self] request, _ in await listCollections(request) }
        router.head("/v1/collections") { [self] request, _ in Self.headOnly(await listCollections(request)) }
        router.addRoutes(index.routes(context: Routes.Context.self))
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            router.on("/v1/collections", method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
        }
        router.addRoutes(attachments.routes(context: Routes.Context.self))
        if configuration.console { router.addRoutes(console.routes(context: Routes.Context.self)) }
        router.addRoutes(review.routes(context: Routes.Context.self))
        // A partition has every endpoint a collection has, under .../partitions/KEY.
        for base in ["/v1/collections/:name", "/v1/collections/:name/partitions/:key"] {
            registerCollectionRoutes(at: base, on: router)
        }
    }

    /// The endpoints of one collection or partition, whose path is `base`.
    private func registerCollectionRoutes<Routes: RouterMethods>(at base: String, on router: Routes) {
        router.get(RouterPath(base)) { [self] request, context in
            try await getCollection(request, path: try collectionPath(context))
        }
        // HEAD: the same status and headers (curl -I), never a body, so nothing is streamed.
        router.head(RouterPath(base)) { [self] request, context in
            Self.headOnly(try await getCollection(request, path: try collectionPath(context)))
        }
        addPublicationRoutes(at: base, to: router)
        router.post(RouterPath(base + "/mutations")) { [self] request, context in
            try await pushMutations(request, context: context)
        }
        router.get(RouterPath(base + "/records/:id/history")) { [self] request, context in
            try await recordHistory(request, context: context)
        }
        router.put(RouterPath(base + "/records/:id")) { [self] request, context in
            try await putRecord(request, context: context)
        }
        router.delete(RouterPath(base + "/records/:id")) { [self] request, context in
            try await deleteRecord(request, context: context)
        }
        router.post(RouterPath(base + "/records")) { [self] request, context in
            try await postRecords(request, context: context)
        }
        // Known paths with other methods get 405, not 404.
        // HEAD wherever GET works: the same status and headers, no body.
        router.head(RouterPath(base + "/records/:id/history")) { [self] request, context in
            Self.headOnly(try await recordHistory(request, context: context))
        }
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            router.on(RouterPath(base), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
            router.on(RouterPath(base + "/records/:id/history"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
        }
        for method in [HTTPRequest.Method.get, .patch, .options, .trace] {
            router.on(RouterPath(base + "/records/:id"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("PUT, DELETE") }
        }
        for method in [HTTPRequest.Method.get, .put, .delete, .patch, .options, .trace] {
            router.on(RouterPath(base + "/records"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("POST") }
            router.on(RouterPath(base + "/mutations"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("POST") }
        }
    }
}

extension DeltaSnapAPI {
    /// The routes of the metrics listener (`serve --metrics-listen`): `/metrics` for anyone
    /// who reaches that address, which the operator keeps off the public network.
    func registerMetricsListener<Routes: RouterMethods>(on router: Routes) {
        router.addRoutes(operations.metricsListenerRoutes(context: Routes.Context.self))
    }

    /// A GET response as HEAD answers it: status and headers, no body.
    static func headOnly(_ response: Response) -> Response {
        Response(status: response.status, headers: response.headers)
    }
}
