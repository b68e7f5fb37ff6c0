import Metrics
import Prometheus

/// The connection layer's figures, on the service's `/metrics`:
/// `deltasnap_connections_open` (a gauge), `deltasnap_connections_shed_total{reason}`
/// (`cap`: answered `503` at the cap; `transfer`: a download refused for want of a descriptor),
/// `deltasnap_connections_reclaimed_total` (idle keep-alive connections closed for new ones),
/// `deltasnap_connection_timeouts_total{kind}` (`head`, `body`, `idle`, `send`).
final class ConnectionMetrics: Sendable {
    let open: Metrics.Meter
    let shedAtCap: Metrics.Counter
    let shedTransfer: Metrics.Counter
    let reclaimed: Metrics.Counter
    private let timeouts: [ConnectionTimeout: Metrics.Counter]

    init(factory: PrometheusMetricsFactory) {
        open = Metrics.Meter(label: "deltasnap_connections_open", factory: factory)
        shedAtCap = Metrics.Counter(label: "deltasnap_connections_shed_total", dimensions: [("reason", "cap")], factory: factory)
        shedTransfer = Metrics.Counter(label: "deltasnap_connections_shed_total", dimensions: [("reason", "transfer")], factory: factory)
        reclaimed = Metrics.Counter(label: "deltasnap_connections_reclaimed_total", factory: factory)
        var timeouts: [ConnectionTimeout: Metrics.Counter] = [:]
        for kind in ConnectionTimeout.allCases {
            timeouts[kind] = Metrics.Counter(label: "deltasnap_connection_timeouts_total", dimensions: [("kind", kind.rawValue)], factory: factory)
        }
        self.timeouts = timeouts
    }

    func timedOut(_ kind: ConnectionTimeout) {
        timeouts[kind]!.increment()
    }
}
