import Hummingbird
import Logging
import Metrics
import NIOCore
import Prometheus

/// `/metrics` for a process that serves no API (`deltasnap follow`): swift-metrics
/// bootstrapped into a Prometheus registry, and a listener of its own that answers
/// `GET`/`HEAD /metrics` with the exposition text — the same format and headers as
/// `serve --metrics-listen`.
///
/// ```swift
/// let metrics = ProcessMetrics.bootstrap()
/// Task { try await metrics.serve(at: .init(host: "127.0.0.1", port: 9465), logger: logger) }
/// ```
public struct ProcessMetrics: Sendable {
    let registry: PrometheusCollectorRegistry

    /// Makes every swift-metrics handle of the process report to one registry. Call once, first.
    public static func bootstrap() -> ProcessMetrics {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return ProcessMetrics(registry: registry)
    }

    /// The Prometheus exposition text.
    public func render() -> String { registry.emitToString() }

    /// Serves `/metrics` at `address` until the task is cancelled; any other path is `404`.
    public func serve(at address: DeltaSnapServer.MetricsAddress, logger: Logger) async throws {
        let router = Router()
        router.middlewares.add(JSONErrors())
        let registry = registry
        @Sendable func response() -> Response {
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
        }
        router.get("/metrics") { _, _ in response() }
        router.head("/metrics") { _, _ in Response(status: .ok, headers: response().headers) }
        let application = Application(
            router: router, configuration: .init(address: .hostname(address.host, port: address.port), serverName: nil),
            onServerRunning: { channel in await address.onRunning(channel.localAddress?.port ?? address.port) },
            logger: logger)
        // No signal handlers of its own: SIGTERM and SIGINT stop the process, not this listener.
        try await application.runService(gracefulShutdownSignals: [])
    }
}

/// Any other path or method gets the API's JSON error body (``APIError/jsonResponse``), as
/// every DeltaSnap listener answers, not Hummingbird's empty one.
private struct JSONErrors<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError {
            let code = error.status == .notFound ? "not_found" : "http_\(error.status.code)"
            return APIError.jsonResponse(
                status: error.status, headers: error.headers, code: code,
                message: error.status == .notFound ? "no such resource: \(request.uri.path) (this listener serves /metrics only)" : error.status.reasonPhrase)
        }
    }
}
