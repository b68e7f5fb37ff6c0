import DeltaSnapCore
import DeltaSnapStore

/// What the collection endpoint answers: the protocol's decision table (docs/PROTOCOL.md
/// §5.1) as a pure function, so every branch is tested without a network.
///
/// ```swift
/// let decision = ServeDecision.decide(.entityTags([token]), head: head) { seconds in
///     try reader.firstVersion(in: head.name, committedAtOrAfter: seconds)
/// }
/// ```
package enum ServeDecision: Equatable, Sendable {
    /// `304 Not Modified`.
    case notModified
    /// `200` with every visible record.
    case full
    /// `200` with the records changed after `version`; `base` is the token it applies on.
    case delta(sinceVersion: UInt64, base: String)

    /// Decides how to answer `request` for a collection at `head`.
    /// `firstVersionCommitted(atOrAfter:)` is consulted only for `If-Modified-Since`.
    package static func decide(
        _ request: ConditionalRequest, head: CollectionHead,
        firstVersionCommitted: (_ atOrAfter: Int64) throws -> UInt64?
    ) rethrows -> ServeDecision {
        switch request {
        case .unconditional, .invalidModifiedSince:
            return .full
        case .anyEntityTag:
            return .notModified
        case .entityTags(let tags):
            var best: ServeDecision = .full
            var bestVersion: UInt64 = 0
            for tag in tags {
                guard let token = ServerToken(tag), token.epoch == head.epoch else { continue }
                // Equal: nothing new. Ahead: a replica that lags or a restored backup; the
                // client keeps its newer state rather than regress.
                if token.version >= head.version { return .notModified }
                if token.version >= head.floor && token.version >= bestVersion {
                    best = .delta(sinceVersion: token.version, base: tag)
                    bestVersion = token.version
                }
            }
            return best
        case .modifiedSince(let seconds):
            guard let first = try firstVersionCommitted(seconds) else { return .notModified }
            // Inclusive to the second: resend what was committed in the same second.
            let since = first - 1
            // Since version 0 is everything: say so with a full body, which also replaces.
            guard since > 0, since >= head.floor else { return .full }
            return .delta(sinceVersion: since, base: ServerToken(epoch: head.epoch, version: since).description)
        }
    }
}
