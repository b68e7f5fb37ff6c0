import Foundation

/// How much one sync may download — the app's data-plan policy.
///
/// On an unmetered network every answer is fetched. On a metered or constrained one (a
/// phone on cellular, Low Data Mode, the user's own setting) a sync still polls — a `304` and
/// a small delta cost next to nothing — but any body over `maximumBodyBytes` is not
/// downloaded: the sync ends ``SyncOutcome/postponed(bytes:budget:)``, the replica keeps the
/// data it has, and the next sync with a budget that allows it fetches the update.
///
/// ```swift
/// await replica.setNetworkBudget(onCellular ? .metered(maximumBodyBytes: 256 * 1024) : .unlimited)
/// if case .postponed = await replica.sync() { banner.text = "Update waiting for Wi-Fi" }
/// ```
///
/// The bytes counted are the answer's `Content-Length` — its size on the wire, gzip — before
/// any of its body is received; a body that announces no length (the server streams only
/// large bodies) is postponed without downloading any of it. Error answers are not limited
/// (their `Retry-After` is heeded). The signed index (§8) is always fetched: it is what says
/// whether anything changed.
public struct NetworkBudget: Sendable, Equatable {
    /// The largest body a sync downloads; nil: any size.
    public var maximumBodyBytes: Int?

    /// Every answer, whatever its size (the default).
    public static let unlimited = NetworkBudget(maximumBodyBytes: nil)

    /// Answers up to `maximumBodyBytes`; larger ones wait.
    public static func metered(maximumBodyBytes: Int) -> NetworkBudget {
        NetworkBudget(maximumBodyBytes: max(0, maximumBodyBytes))
    }
}

#if canImport(Network)
import Network

extension NetworkBudget {
    /// The budget for a network path as `NWPathMonitor` reports it: `metered` on an
    /// expensive (cellular, a personal hotspot) or constrained (Low Data Mode) path.
    ///
    /// ```swift
    /// let monitor = NWPathMonitor()
    /// monitor.pathUpdateHandler = { path in
    ///     Task { await replica.setNetworkBudget(.for(path, meteredBytes: 256 * 1024)) }
    /// }
    /// monitor.start(queue: .main)
    /// ```
    public static func `for`(_ path: NWPath, meteredBytes: Int) -> NetworkBudget {
        path.isExpensive || path.isConstrained ? .metered(maximumBodyBytes: meteredBytes) : .unlimited
    }
}
#endif
