import Hummingbird
import NIOCore

/// What an operator's tools ask: `/healthz` for anyone, `/metrics` (Prometheus text) for the
/// admin token — or for anyone who reaches `serve --metrics-listen`'s address, which the
/// operator keeps off the public network (``metricsListenerRoutes(context:)``).
///
/// ```swift
/// routes.addRoutes(operations.routes(context: BasicRequestContext.self))
/// ```
struct OperationsController: GatedController {
    let gate: Gate
    let metrics: ServerMetrics

    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.get("/healthz") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"status\":\"ok\"}\n")))
        }
        routes.head("/healthz") { _, _ in Response(status: .ok, headers: [.contentType: "application/json"]) }
        routes.get("/metrics") { request, _ in
            try gate.requireAdmin(request, for: "/metrics")
            return metricsResponse()
        }
        routes.head("/metrics") { request, _ in
            try gate.requireAdmin(request, for: "/metrics")
            return Self.headOnly(metricsResponse())
        }
        return routes
    }

    /// The metrics listener's routes: `/metrics` for anyone who reaches its address.
    func metricsListenerRoutes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.get("/metrics") { _, _ in metricsResponse() }
        routes.head("/metrics") { _, _ in Self.headOnly(metricsResponse()) }
        return routes
    }

    /// The server's counters in the Prometheus text format.
    func metricsResponse() -> Response {
        Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: metrics.registry.emitToBuffer())))
    }
}
