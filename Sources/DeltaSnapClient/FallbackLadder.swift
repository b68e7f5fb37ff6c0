/// The fallback ladder of a pull (PROTOCOL.md §6 steps 2–4) as pure decisions, tested
/// without a network: the same table as the browser client's `ladder.ts`. The replica runs
/// the requests; this value says what each answer leads to.
///
/// ```swift
/// FallbackLadder.decide(.conditional, status: 304)   // .notModified
/// FallbackLadder.decide(.conditional, status: 200)   // .apply
/// FallbackLadder.afterUnusableBody(.conditional)     // .fullFetch: one fetch without validators
/// FallbackLadder.afterUnusableBody(.full)            // .keep: never loop, never empty the replica
/// ```
package enum FallbackLadder {
    /// Which request of a pull answered: the conditional one, or the validator-less full fetch.
    package enum Step: Sendable, Equatable {
        case conditional, full
    }

    /// What an answer leads to.
    package enum Decision: Sendable, Equatable {
        /// The state held is current.
        case notModified
        /// Apply the body (a delta or a full body), verified.
        case apply
        /// Keep the state held and count a failure. `retryable`: trying later may help;
        /// `unavailable`: the server is out of reach or overloaded.
        case keep(retryable: Bool, unavailable: Bool, reason: String)
    }

    /// What follows a `200` whose body could not be applied.
    package enum AfterUnusableBody: Sendable, Equatable {
        /// One full fetch without validators.
        case fullFetch
        /// Keep the state held.
        case keep
    }

    /// The decision for an answer with `status` to the request of `step`.
    package static func decide(_ step: Step, status: Int) -> Decision {
        switch (step, status) {
        case (.conditional, 304): return .notModified
        case (_, 200): return .apply
        default:
            let unavailable = isUnavailable(status: status)
            let reason = step == .full ? "full fetch got status \(status)" : (500...599).contains(status) ? "server error \(status)" : "unexpected status \(status)"
            return .keep(retryable: unavailable, unavailable: unavailable, reason: reason)
        }
    }

    /// A `200` whose body could not be applied (bad gzip or JSON, wrong base, count, checksum
    /// or digest): after the conditional request one full fetch; after that, keep.
    package static func afterUnusableBody(_ step: Step) -> AfterUnusableBody {
        step == .conditional ? .fullFetch : .keep
    }

    /// 408, 429 and 5xx: the server is out of reach or overloaded; trying later can help.
    package static func isUnavailable(status: Int) -> Bool {
        status == 408 || status == 429 || status >= 500
    }
}
