import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// The DeltaSnap endpoints and their state (heads in memory, cached full bodies) on a
/// DeltaSnap store (SQLite or PostgreSQL). Mount them in your own Hummingbird app with
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
    /// Attachments served lately: references, and small blobs whole (their kept descriptors
    /// share the connections' budget).
    let attachmentMemory: AttachmentMemory
    /// What is answered before the router, from memory (the one thing its handlers hold).
    let memory: MemoryAnswers
    var deltas: DeltaCache { memory.deltas }
    var waiters: IndexWaiters { memory.index.waiters }

    // One controller per feature, each with only its collaborators and its own routes.
    let operations: OperationsController
    let index: IndexController
    let collections: CollectionsController
    let writes: WritesController
    let attachments: AttachmentsController
    let review: ReviewController
    let console: ConsoleController

    /// A service on `store`, which it owns from now on (``shutdown()`` closes it; so does a
    /// failed init). The composition root: it builds the shared state (heads, caches, access
    /// rules, the index's waiters) and hands each controller what it needs.
    ///
    /// `store` is one of DeltaSnap's: ``DeltaSnapSQLiteStore/SQLiteCollectionStore`` or
    /// `PostgresCollectionStore` (another type is refused, and closed).
    public init(store servable: any ServableStore, configuration: DeltaSnapServerConfiguration = DeltaSnapServerConfiguration()) async throws {
        guard let store = servable as? any CollectionStore else {
            await servable.close()
            throw StoreError(.badLocation, "DeltaSnapAPI serves a SQLiteCollectionStore or a PostgresCollectionStore, not a \(type(of: servable))")
        }
        self.configuration = configuration
        let openConnections = ConnectionCount()
        self.openConnections = openConnections
        let cap = configuration.connections.maximumConnections
        let attachmentMemory = AttachmentMemory(
            transferDescriptors: configuration.connections.transferDescriptors, roomToKeep: { cap - openConnections.value })
        self.attachmentMemory = attachmentMemory
        connectionMetrics = ConnectionMetrics(factory: metrics.factory)
        // Read once from the rules: every write and push asks. Their polls are never answered
        // from memory, where a preview device's token would not be looked at.
        let reviewed = configuration.access.rules.reviewed
        var policy = configuration.access
        policy.adminToken = configuration.writeToken ?? policy.adminToken
        let waiters = IndexWaiters(debounce: configuration.waitDebounce, capacity: configuration.maximumWaiters)
        let accessControl: AccessControl
        let heads: HeadCache
        do {
            accessControl = try AccessControl(policy: policy, metrics: TokenMetrics(factory: metrics.factory))
            heads = HeadCache(
                try await store.collections(), partitionCapacity: configuration.partitionHeadCapacity, onChange: { [waiters] in waiters.changed() })
            // Every writer — this server, `deltasnap import`, a follower — reads them from the store.
            let held = try await store.reviewSettings()
            if !reviewed.isEmpty || !held.isEmpty { try await store.setReviewSettings(reviewed) }
        } catch {
            await store.close()
            throw error
        }
        self.heads = heads
        self.store = store
        // Cast once: a cast to a protocol existential on every download was a measurable part
        // of a small one's CPU.
        let attachmentFiles = store as? any AttachmentFiles
        let memberships = MembershipDirectory(collection: policy.rules.memberships, store: store, heads: heads)
        let gate = Gate(accessControl: accessControl, memberships: memberships)
        let reviewRouting = ReviewRouting(gate: gate, store: store, heads: heads, reviewed: reviewed)
        let fullBodies = FullBodyCache()
        let recentPushes = RecentPushes()
        let viewIndex = ViewIndex(
            publication: IndexPublisher(keys: configuration.signingKeys, lifetime: Int64(configuration.indexLifetime)), heads: heads,
            accessControl: accessControl, memberships: memberships, store: store, maxAge: configuration.indexMaxAge)
        index = IndexController(viewIndex: viewIndex, waiters: waiters)
        memory = MemoryAnswers(
            configuration: configuration, metrics: metrics, accessControl: accessControl, heads: heads, deltas: DeltaCache(),
            attachmentMemory: attachmentMemory, attachmentFiles: attachmentFiles, index: index)
        operations = OperationsController(gate: gate, metrics: metrics)
        collections = CollectionsController(
            gate: gate, reviewRouting: reviewRouting, store: store, heads: heads, memory: memory, fullBodies: fullBodies,
            pagedVersions: PagedVersions(budgetBytes: configuration.pagingBudgetBytes), metrics: metrics, access: configuration.access,
            fullBodyCacheMaximumRecords: configuration.fullBodyCacheMaximumRecords)
        attachments = AttachmentsController(
            gate: gate, reviewRouting: reviewRouting, store: store, attachmentFiles: attachmentFiles, attachmentMemory: attachmentMemory,
            activeUploads: ActiveUploads(), metrics: metrics, connectionMetrics: connectionMetrics, access: configuration.access,
            maximumAttachmentBytes: configuration.maximumAttachmentBytes, uploadLifetime: configuration.uploadLifetime)
        writes = WritesController(
            gate: gate, store: reviewRouting.writer, heads: heads, attachments: attachments, recentPushes: recentPushes,
            keepsRecentPushes: configuration.console, maximumWriteBodyBytes: configuration.maximumWriteBodyBytes,
            maximumPushBodyBytes: configuration.maximumPushBodyBytes, pushRetention: configuration.pushRetention, forkCollections: configuration.forkCollections)
        review = ReviewController(gate: gate, store: store, heads: heads)
        console = ConsoleController(
            gate: gate, store: store, heads: heads, deltas: memory.deltas, fullBodies: fullBodies, waiters: waiters, recentPushes: recentPushes,
            consoleSizes: ConsoleSizes())
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
                    responder: InformationalResponder.wrapping(responder, limits: self.attachments.uploadLimits, logger: logger),
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

    /// Adds every route, without middleware, to `router`: each controller's own.
    func register<Routes: RouterMethods>(on router: Routes) {
        router.addRoutes(operations.routes(context: Routes.Context.self))
        router.addRoutes(index.routes(context: Routes.Context.self))
        router.addRoutes(collections.routes(context: Routes.Context.self))
        router.addRoutes(writes.routes(context: Routes.Context.self))
        router.addRoutes(attachments.routes(context: Routes.Context.self))
        router.addRoutes(review.routes(context: Routes.Context.self))
        if configuration.console { router.addRoutes(console.routes(context: Routes.Context.self)) }
    }
}

extension DeltaSnapAPI {
    /// The routes of the metrics listener (`serve --metrics-listen`): `/metrics` for anyone
    /// who reaches that address, which the operator keeps off the public network.
    func registerMetricsListener<Routes: RouterMethods>(on router: Routes) {
        router.addRoutes(operations.metricsListenerRoutes(context: Routes.Context.self))
    }
}
