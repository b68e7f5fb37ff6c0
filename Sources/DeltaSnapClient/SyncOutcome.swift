import DeltaSnapCore
import Foundation

/// What one ``DeltaSnapReplica/sync()`` did.
public enum SyncOutcome: Sendable, Equatable {
    /// `304`: the replica was already current.
    case notModified
    /// A delta or full body was applied and verified.
    case applied(ApplyResult)
    /// The first answer could not be applied (`reason`); a full body fetched without
    /// validators replaced the collection.
    case reset(ApplyResult, reason: String)
    /// Nothing changed locally: the previous good state is kept. `retryAfter` is when the
    /// next attempt will be made (nil: not retried automatically, e.g. a 4xx).
    case failed(reason: String, retryAfter: Date?)
    /// A backoff or server-requested delay is still running; no request was made.
    case deferred(until: Date)
    /// The server has an update, but its body (`bytes`, when announced) is over the
    /// ``NetworkBudget`` of `budget` bytes: nothing was downloaded or changed; a sync with a
    /// budget that allows it fetches it.
    case postponed(bytes: Int?, budget: Int)

    /// A one-word name for logs.
    public var name: String {
        switch self {
        case .notModified: "not-modified"
        case .applied(let result): result.kind == .full ? "full" : "delta"
        case .reset: "reset"
        case .failed: "failed"
        case .deferred: "deferred"
        case .postponed: "postponed"
        }
    }
}

/// Why a sync failed, for a caller deciding what to do next (the CLI's exit code).
public enum SyncFailureKind: Sendable, Equatable {
    /// Try later: no answer (network, timeout), `408`, `429` or `5xx`, or a wait the server
    /// asked for (`Retry-After`, `Backoff`) is still running.
    case unavailable
    /// The answer could not be used (another `4xx`, a body or index that does not verify):
    /// the same request later gives the same answer until something changes.
    case rejected
}

/// Which waits a sync respects before it sends a request. Ordered from the fewest to the most.
public enum WaitPolicy: Int, Sendable, Comparable {
    /// None: sync now (an operator overriding, `--ignore-backoff`).
    case none
    /// Only what the server asked for with `Retry-After` or `Backoff`, kept across restarts:
    /// a person running a command again retries a network error at once, but never sooner
    /// than the server said.
    case serverRequested
    /// Those and the replica's own exponential backoff after failures (an app syncing in the
    /// background).
    case all

    public static func < (lhs: WaitPolicy, rhs: WaitPolicy) -> Bool { lhs.rawValue < rhs.rawValue }
}
