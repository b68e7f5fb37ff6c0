import DeltaSnapCore
import DeltaSnapStore

/// How a poll of a collection or partition is answered, as far as memory can tell: the one
/// statement of the poll rules (the current token's `304`, the decision table, the delta
/// cache) for every layer that answers polls — the router's handler, the fast path and the
/// raw poll handler before it. Each caller then counts and writes the answer its own way,
/// or reads the store for what memory cannot answer.
enum PollPlan {
    /// `304 Not Modified` with the head's validators.
    case notModified(ServedHead)
    /// `200` with this cached delta.
    case cachedDelta(PollAnswer)
    /// A full body, or a delta not cached yet: the store is read.
    case read(ServeDecision)
    /// Only `If-Modified-Since`: the first version committed since that second is the
    /// store's to say (``ServeDecision/decide(_:head:firstVersionCommitted:)`` with it).
    case modifiedSince(seconds: Int64)
}

extension MemoryAnswers {
    /// Plans the answer to a poll of `served`. `allowsBody`: false for a `HEAD` answered as
    /// such (never a cached body then).
    ///
    /// ```swift
    /// if case .notModified(let served) = api.planPoll(served, ifNoneMatch: "\"e.7\"", ifModifiedSince: nil, gzip: true, allowsBody: true) { … }
    /// ```
    func planPoll(_ served: ServedHead, ifNoneMatch: String?, ifModifiedSince: String?, gzip: Bool, allowsBody: Bool) -> PollPlan {
        // The common poll: the client holds the current token, sent back as received.
        if served.isCurrent(ifNoneMatch: ifNoneMatch) { return .notModified(served) }
        func cached(from base: String) -> PollAnswer? { deltas[DeltaCache.Key(head: served.head, base: base, gzip: gzip)] }
        // The common older poll, one strong tag sent back as received: its cached delta is
        // keyed by epoch, head and floor, so a hit is the decision table's answer already.
        let tag = allowsBody ? ifNoneMatch.flatMap(Self.singleStrongTag) : nil
        if let tag, let hit = cached(from: tag) { return .cachedDelta(hit) }
        let conditional = ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: ifModifiedSince)
        if case .modifiedSince(let seconds) = conditional { return .modifiedSince(seconds: seconds) }
        // Never consulted without If-Modified-Since: this touches no database.
        let decision = ServeDecision.decide(conditional, head: served.head) { _ in nil }
        switch decision {
        case .notModified:
            return .notModified(served)
        case .delta(_, let base) where allowsBody && base != tag:
            return cached(from: base).map(PollPlan.cachedDelta) ?? .read(decision)
        default:
            return .read(decision)
        }
    }
}
