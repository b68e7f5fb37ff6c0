import Foundation

/// When a key set is fetched again, as bounds an operator can read: the provider's
/// `Cache-Control: max-age` within ``minimumAge``…``maximumAge``, ``defaultAge`` without
/// one; on a `kid` the set lacks at most once per ``unknownKidInterval`` (forged `kid`s
/// cannot make the server hammer the provider); after a failed fetch, again after
/// ``retryDelay`` (doubling, up to ``minimumAge``) while the last good set stays in use.
public struct KeySetRefreshPolicy: Sendable, Equatable {
    /// A `max-age` under this (Auth0 sends 15 s) is raised to it: 5 minutes.
    public var minimumAge: TimeInterval = 5 * 60
    /// A `max-age` over this (or a set that says nothing) is cut to it: the set is fetched at least daily.
    public var maximumAge: TimeInterval = 24 * 3600
    /// Without `Cache-Control: max-age` (and for `--jwks-file`, re-read): 1 hour.
    public var defaultAge: TimeInterval = 3600
    /// At most one fetch per this interval for tokens naming a `kid` the set lacks: 30 s.
    public var unknownKidInterval: TimeInterval = 30
    /// The first retry after a failed refresh: 30 s, doubling up to ``minimumAge``.
    public var retryDelay: TimeInterval = 30

    public init() {}

    /// How long a set fetched with `maxAge` (nil: none given) is used before it is fetched again.
    func age(for maxAge: TimeInterval?) -> TimeInterval {
        min(max(maxAge ?? defaultAge, minimumAge), maximumAge)
    }
}

/// The refresh decisions of one key set, as a plain value: each event returns what the
/// caller must do, no I/O inside (the fetch is the caller's).
struct KeySetSchedule: Sendable {
    let policy: KeySetRefreshPolicy
    /// Until when the set in use is fresh.
    private(set) var freshUntil: Date
    /// No fetch before this after a failure.
    private(set) var retryAt: Date?
    private(set) var failures = 0
    private var lastUnknownKidFetch: Date?

    init(policy: KeySetRefreshPolicy, fetchedAt now: Date, maxAge: TimeInterval?) {
        self.policy = policy
        freshUntil = now.addingTimeInterval(policy.age(for: maxAge))
    }

    mutating func fetched(at now: Date, maxAge: TimeInterval?) {
        freshUntil = now.addingTimeInterval(policy.age(for: maxAge))
        retryAt = nil
        failures = 0
    }

    mutating func failed(at now: Date) {
        failures += 1
        let delay = min(policy.retryDelay * pow(2, Double(min(failures - 1, 20))), max(policy.minimumAge, policy.retryDelay))
        retryAt = now.addingTimeInterval(delay)
    }

    /// Whether the set should be fetched again in the background (it is stale, and no
    /// failed fetch asks to wait).
    func isStale(at now: Date) -> Bool {
        now >= freshUntil && (retryAt.map { now >= $0 } ?? true)
    }

    /// Whether a token naming an unknown `kid` may fetch the set now; if so, the fetch is
    /// counted against the interval.
    mutating func mayFetchForUnknownKid(at now: Date) -> Bool {
        if let last = lastUnknownKidFetch, now.timeIntervalSince(last) < policy.unknownKidInterval { return false }
        lastUnknownKidFetch = now
        return true
    }
}
