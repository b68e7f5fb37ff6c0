import DeltaSnapStore
import Hummingbird
import HummingbirdCore
import Logging
import ServiceLifecycle

/// Runs a DeltaSnap server: the routes of ``DeltaSnapAPI`` on Hummingbird, plus the
/// watcher that notices other processes' commits.
///
/// ```swift
/// let store = try SQLiteCollectionStore(path: "deltasnap.sqlite")
/// let server = try await DeltaSnapServer(store: store, configuration: .init(writeToken: "s3cret"))
/// try await server.run(host: "127.0.0.1", port: 8080)   // until SIGINT or SIGTERM
/// ```
public struct DeltaSnapServer: Sendable {
    public let service: DeltaSnapAPI
    public var logger: Logger
    /// A directory of static files served where no DeltaSnap route matches (`index.html`
    /// for a directory): a web app next to the API, on one origin, so the browser client
    /// needs no CORS. `nil`: unmatched paths are a JSON 404.
    public var staticFiles: String?
    /// Where `/metrics` is served to anyone (the Prometheus convention, e.g. `127.0.0.1:9464`),
    /// apart from the API; `nil`: only on the API's address, to the admin token.
    public var metricsAddress: MetricsAddress?

    /// The address of the metrics listener, and what to call once it is bound.
    public struct MetricsAddress: Sendable {
        public var host: String
        /// 0 picks a free port, reported to ``onRunning``.
        public var port: Int
        public var onRunning: @Sendable (Int) async -> Void

        public init(host: String, port: Int, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) {
            self.host = host
            self.port = port
            self.onRunning = onRunning
        }
    }

    /// A server on `store` (a SQLite or PostgreSQL store; it owns it from now on).
    public init(
        store: any ServableStore, configuration: DeltaSnapServerConfiguration = DeltaSnapServerConfiguration(),
        logger: Logger = Logger(label: "deltasnap")
    ) async throws {
        service = try await DeltaSnapAPI(store: store, configuration: configuration)
        self.logger = logger
    }

    /// A server on an existing service.
    public init(service: DeltaSnapAPI, logger: Logger = Logger(label: "deltasnap")) {
        self.service = service
        self.logger = logger
    }

    /// Serves until SIGINT/SIGTERM (graceful: in-flight responses finish) or until the
    /// task is cancelled. `onRunning` receives the bound port (useful with port 0).
    public func run(host: String, port: Int, handleSignals: Bool = true, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let router = Router()
        // The whole app is DeltaSnap's here, so the middleware wraps the router: a request
        // no route matches gets a JSON 404 too, counted and logged like the rest.
        router.middlewares.add(service.errorMiddleware())
        if let staticFiles {
            // Inside the error middleware: it answers only what the router did not (a 404),
            // and a file it cannot find stays a JSON 404.
            router.middlewares.add(FileMiddleware(staticFiles, searchForIndexHtml: true, logger: logger))
        }
        service.register(on: router)
        let app = Application(
            router: router,
            server: service.httpServer(logger: logger),
            configuration: .init(
                address: .hostname(host, port: port), serverName: nil, backlog: 511,
                availableConnectionsDelegate: DescriptorBackstop(maximum: service.configuration.connections.acceptingAtMost)),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) },
            logger: logger)
        // The watcher and the compaction schedule run beside the server and are cancelled when
        // it ends, but not waited for: a stop must not hang on a store whose watcher is slow to
        // see its cancellation (a PostgreSQL notification stream across a database restart).
        let watcher = Task { await service.watchForChanges() }
        let compaction = service.configuration.compaction.map { schedule in
            Task { [logger] in await service.runCompaction(schedule, logger: logger) }
        }
        let served: Result<Void, any Error>
        do {
            // Services stop in reverse order: the held index requests are answered first, so
            // the server's graceful shutdown does not wait out their waits.
            var services: [any Service] = [app, WaiterRelease(service: service)]
            if let metricsAddress { services.insert(metricsApplication(at: metricsAddress), at: 0) }
            if handleSignals {
                try await ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
            } else {
                try await Self.runUntilCancelled(services, logger: logger)
            }
            served = .success(())
        } catch {
            served = .failure(error)
        }
        watcher.cancel()
        compaction?.cancel()
        await service.shutdown()
        try served.get()
    }

    /// The metrics listener: `/metrics` and nothing else, with the JSON 404 of the API for
    /// any other path.
    private func metricsApplication(at address: MetricsAddress) -> some Service {
        let router = Router()
        router.middlewares.add(service.errorMiddleware())
        service.registerMetricsListener(on: router)
        return Application(
            router: router, configuration: .init(address: .hostname(address.host, port: address.port), serverName: nil),
            onServerRunning: { channel in await address.onRunning(channel.localAddress?.port ?? address.port) },
            logger: logger)
    }

    /// Runs `app` until this task is cancelled, then shuts it down gracefully, at most
    /// `grace` long before cancelling it. Cancelling the serving task outright can drop a
    /// connection accepted at that instant without closing its `NIOAsyncChannel`, which
    /// traps ("Deinited NIOAsyncWriter without calling finish()", swift-nio#2637); a graceful
    /// shutdown serves and closes it. The bound keeps a connection held open by a client from
    /// delaying a stop for ever.
    static func runUntilCancelled(_ services: [any Service], logger: Logger, grace: Duration = .seconds(2)) async throws {
        let services = ServiceGroup(configuration: .init(services: services, logger: logger))
        // Unstructured, so the caller's cancellation reaches it only as a graceful shutdown.
        let running = Task { try await services.run() }
        try await withTaskCancellationHandler {
            try await running.value
        } onCancel: {
            Task {
                await services.triggerGracefulShutdown()
                try? await Task.sleep(for: grace)
                running.cancel()
            }
        }
    }
}

/// Answers every request held by `GET /v1/index?wait=` when a graceful shutdown begins.
private struct WaiterRelease: Service {
    let service: DeltaSnapAPI

    func run() async throws {
        // Throws when the group is cancelled instead (the server failed): release then too.
        try? await gracefulShutdown()
        service.releaseWaiters()
    }
}
