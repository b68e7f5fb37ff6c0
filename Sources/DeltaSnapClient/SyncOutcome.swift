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

    /// A one-word name for logs.
    public var name: String {
        switch self {
        case .notModified: "not-modified"
        case .applied(let result): result.kind == .full ? "full" : "delta"
        case .reset: "reset"
        case .failed: "failed"
        case .deferred: "deferred"
        }
    }
}
