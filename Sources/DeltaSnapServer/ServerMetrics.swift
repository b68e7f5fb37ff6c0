import Foundation

/// Counters for `/metrics`, rendered in the Prometheus text format.
///
/// Hand-written: a dozen counters do not justify a metrics backend dependency
/// (swift-prometheus) and its build time.
public final class ServerMetrics: @unchecked Sendable {
    public enum Outcome: String, CaseIterable, Sendable {
        case notModified = "not_modified"
        case delta
        case full
    }

    private let lock = NSLock()
    private var responses: [ResponseKey: Int] = [:]
    private var outcomes: [Outcome: Int] = [:]
    private var bytes: [Outcome: Int] = [:]

    private struct ResponseKey: Hashable {
        var route: String
        var status: Int
    }

    public init() {}

    func countResponse(route: String, status: Int) {
        lock.withLock { responses[ResponseKey(route: route, status: status), default: 0] += 1 }
    }

    func countOutcome(_ outcome: Outcome) {
        lock.withLock { outcomes[outcome, default: 0] += 1 }
    }

    func countBytes(_ count: Int, for outcome: Outcome) {
        lock.withLock { bytes[outcome, default: 0] += count }
    }

    /// The Prometheus exposition text.
    public func render() -> String {
        lock.withLock {
            var out = "# HELP deltasnap_http_responses_total HTTP responses by route and status.\n# TYPE deltasnap_http_responses_total counter\n"
            for (key, count) in responses.sorted(by: { ($0.key.route, $0.key.status) < ($1.key.route, $1.key.status) }) {
                out += "deltasnap_http_responses_total{route=\"\(key.route)\",status=\"\(key.status)\"} \(count)\n"
            }
            out += "# HELP deltasnap_collection_responses_total Collection responses by outcome.\n# TYPE deltasnap_collection_responses_total counter\n"
            for outcome in Outcome.allCases {
                out += "deltasnap_collection_responses_total{outcome=\"\(outcome.rawValue)\"} \(outcomes[outcome, default: 0])\n"
            }
            out += "# HELP deltasnap_body_bytes_sent_total Body bytes sent (as encoded on the wire) by outcome.\n# TYPE deltasnap_body_bytes_sent_total counter\n"
            for outcome in [Outcome.delta, .full] {
                out += "deltasnap_body_bytes_sent_total{outcome=\"\(outcome.rawValue)\"} \(bytes[outcome, default: 0])\n"
            }
            return out
        }
    }
}
