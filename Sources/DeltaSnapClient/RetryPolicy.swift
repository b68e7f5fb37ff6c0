import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// When to try again after a failed sync: exponential backoff with jitter, never sooner than
/// the server's `Retry-After` or `Backoff` asks. A plain value, tested without a network.
///
/// ```swift
/// let policy = RetryPolicy(initialDelay: 5, maximumDelay: 3600)
/// let wait = policy.delay(afterFailures: 3, serverAsked: 120, random: 0.5)  // ≥ 120 s
/// ```
public struct RetryPolicy: Sendable, Equatable {
    /// The wait after the first failure, in seconds.
    public var initialDelay: Double
    /// The longest wait between attempts, in seconds.
    public var maximumDelay: Double
    /// The share of the delay that is randomised (0 none, 1 all), so a fleet of clients
    /// that failed together does not retry together.
    public var jitter: Double

    public init(initialDelay: Double = 5, maximumDelay: Double = 3600, jitter: Double = 0.5) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.jitter = jitter
    }

    /// Seconds to wait after `failures` consecutive failures (≥ 1); `random` in [0, 1).
    package func delay(afterFailures failures: Int, serverAsked: Double?, random: Double) -> Double {
        let exponent = Double(min(max(failures - 1, 0), 30))
        let base = min(maximumDelay, initialDelay * pow(2, exponent))
        let jittered = base * (1 - jitter) + base * jitter * random
        return max(jittered, serverAsked ?? 0)
    }

    /// Seconds a `Retry-After` (seconds or HTTP date) or `Backoff` (seconds) header asks for.
    package static func serverDelay(retryAfter: String?, backoff: String?, now: Date) -> Double? {
        var asked: [Double] = []
        if let backoff, let seconds = Double(backoff.trimmingCharacters(in: .whitespaces)), seconds >= 0 { asked.append(seconds) }
        if let retryAfter {
            let text = retryAfter.trimmingCharacters(in: .whitespaces)
            if let seconds = Double(text), seconds >= 0 {
                asked.append(seconds)
            } else if let date = HTTPDateParsing.parse(text) {
                asked.append(max(0, date.timeIntervalSince(now)))
            }
        }
        return asked.max()
    }
}

/// The green/amber/red dot: how the replica's syncing stands.
public enum SyncStatus: String, Sendable, Equatable {
    /// The last sync succeeded.
    case synced
    /// Syncs have been failing for less than ``failingAfter``.
    case retrying
    /// Syncs have been failing for longer than ``failingAfter``: show it to the user.
    case failing
    /// No sync has succeeded yet (the data, if any, came from the bundled snapshot).
    case neverSynced
    /// The newest signed index verified has expired and no newer one could be verified:
    /// the data may be frozen by whoever sits on the path. Show it to the user.
    case unverifiablyOld
    /// The last sync found an update larger than the ``NetworkBudget`` allows: the data is
    /// as of the sync before; the update comes with a budget that allows it.
    case updatePostponed

    public static let failingAfter: TimeInterval = 3600

    static func of(_ state: ReplicaState, now: Date) -> SyncStatus {
        if let expires = state.indexExpires, now.timeIntervalSince(expires) > TimeInterval(SignedIndex.allowedClockSkew) { return .unverifiablyOld }
        guard let failingSince = state.failingSince else {
            return state.lastSuccessfulSync == nil ? .neverSynced : .synced
        }
        return now.timeIntervalSince(failingSince) > failingAfter ? .failing : .retrying
    }
}

enum HTTPDateParsing {
    static func parse(_ text: String) -> Date? {
        HTTPDate.parse(text).map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }
}
