import Foundation
import Metrics
import Prometheus
import NIOConcurrencyHelpers

/// The server's counters and latency histograms, recorded through swift-metrics and exported
/// in the Prometheus text format at `/metrics` by swift-prometheus.
///
/// Each service owns its registry, so two services in one process (tests, or a DeltaSnap
/// service mounted in a bigger app) never mix their figures; ``factory`` is there for
/// `MetricsSystem.bootstrap(_:)` when the process wants every library's metrics on the same
/// page, as `deltasnap serve` does.
///
/// ```swift
/// let metrics = ServerMetrics()
/// MetricsSystem.bootstrap(metrics.factory)   // optional: the whole process on one /metrics
/// print(metrics.render())                     // Prometheus exposition text
/// ```
///
/// Metric names (docs/ARCHITECTURE.md, "Metrics"): `deltasnap_http_responses_total{route,status}`,
/// `deltasnap_collection_responses_total{outcome}`, `deltasnap_body_bytes_sent_total{outcome}`,
/// `deltasnap_collection_response_duration_seconds{outcome}` (a histogram),
/// `deltasnap_fast_path_responses_total` (answers given before the router),
/// `deltasnap_attachment_bytes_sent_total`, `deltasnap_attachment_bytes_received_total`,
/// `deltasnap_attachment_uploads_in_progress` (a gauge), `deltasnap_attachments_stored_total`.
public final class ServerMetrics: Sendable {
    /// What a `GET /v1/collections/{name}` answered.
    public enum Outcome: String, CaseIterable, Sendable {
        case notModified = "not_modified"
        case delta
        case full
    }

    /// Where the metrics are kept; `render()` emits it.
    public let registry: PrometheusCollectorRegistry
    /// A swift-metrics factory writing into ``registry``.
    public let factory: PrometheusMetricsFactory

    /// Handles are made once: on the 304 path a registry lookup (a lock and a dictionary of
    /// label sets) would cost more than the increment.
    private let outcomes: [Outcome: Metrics.Counter]
    private let bytes: [Outcome: Metrics.Counter]
    private let latencies: [Outcome: Metrics.Timer]
    private let fastPathAnswers: Metrics.Counter
    /// `deltasnap_http_responses_total` of the collection route's 304s and 200s, made once:
    /// the fast paths count every poll and should not take the lock below to find them.
    private let collectionNotModifiedResponses: Metrics.Counter
    private let collectionOKResponses: Metrics.Counter
    /// `deltasnap_http_responses_total` of a download's 200s, made once (as the collection's).
    private let attachmentOKResponses: Metrics.Counter
    private let responses: NIOLockedValueBox<[ResponseKey: Metrics.Counter]>
    /// Attachment bytes served (`GET …/attachments/{hash}`) and received (uploads).
    let attachmentBytesSent: Metrics.Counter
    let attachmentBytesReceived: Metrics.Counter
    /// Upload requests whose content is streaming in now.
    let uploadsInProgress: Metrics.Meter
    /// Blobs proven and kept by an upload.
    let attachmentsStored: Metrics.Counter

    private struct ResponseKey: Hashable, Sendable {
        var route: String
        var status: Int
    }

    /// Buckets for answers that take microseconds (a 304 from memory) to seconds (a large
    /// body streamed from the database): the library's default starts at 5 ms, where every
    /// 304 and cached delta would land in the first bucket.
    static let latencyBuckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .milliseconds(2.5), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
        .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = Self.latencyBuckets
        self.factory = factory
        var outcomes: [Outcome: Metrics.Counter] = [:]
        var bytes: [Outcome: Metrics.Counter] = [:]
        var latencies: [Outcome: Metrics.Timer] = [:]
        for outcome in Outcome.allCases {
            let dimensions = [("outcome", outcome.rawValue)]
            outcomes[outcome] = Metrics.Counter(label: "deltasnap_collection_responses_total", dimensions: dimensions, factory: factory)
            latencies[outcome] = Metrics.Timer(label: "deltasnap_collection_response_duration_seconds", dimensions: dimensions, factory: factory)
            if outcome != .notModified {
                bytes[outcome] = Metrics.Counter(label: "deltasnap_body_bytes_sent_total", dimensions: dimensions, factory: factory)
            }
        }
        self.outcomes = outcomes
        self.bytes = bytes
        self.latencies = latencies
        fastPathAnswers = Metrics.Counter(label: "deltasnap_fast_path_responses_total", factory: factory)
        attachmentBytesSent = Metrics.Counter(label: "deltasnap_attachment_bytes_sent_total", factory: factory)
        attachmentBytesReceived = Metrics.Counter(label: "deltasnap_attachment_bytes_received_total", factory: factory)
        uploadsInProgress = Metrics.Meter(label: "deltasnap_attachment_uploads_in_progress", factory: factory)
        attachmentsStored = Metrics.Counter(label: "deltasnap_attachments_stored_total", factory: factory)
        func collectionResponses(_ status: Int) -> Metrics.Counter {
            Metrics.Counter(label: "deltasnap_http_responses_total", dimensions: [("route", Self.collectionRoute), ("status", String(status))], factory: factory)
        }
        collectionNotModifiedResponses = collectionResponses(304)
        collectionOKResponses = collectionResponses(200)
        attachmentOKResponses = Metrics.Counter(
            label: "deltasnap_http_responses_total", dimensions: [("route", Self.attachmentRoute), ("status", "200")], factory: factory)
        // The router's path counts into the same series.
        responses = NIOLockedValueBox([
            ResponseKey(route: Self.collectionRoute, status: 304): collectionNotModifiedResponses,
            ResponseKey(route: Self.collectionRoute, status: 200): collectionOKResponses,
            ResponseKey(route: Self.attachmentRoute, status: 200): attachmentOKResponses,
        ])
    }

    /// The route label the router gives `GET /v1/collections/{name}`.
    static let collectionRoute = "/v1/collections/{name}"

    func countResponse(route: String, status: Int) {
        let key = ResponseKey(route: route, status: status)
        let counter = responses.withLockedValue { responses in
            if let counter = responses[key] { return counter }
            let counter = Metrics.Counter(
                label: "deltasnap_http_responses_total", dimensions: [("route", route), ("status", String(status))], factory: factory)
            responses[key] = counter
            return counter
        }
        counter.increment()
    }

    /// Counts a collection answer and the time from the request's arrival to its head.
    func countOutcome(_ outcome: Outcome, since start: ContinuousClock.Instant) {
        outcomes[outcome]!.increment()
        latencies[outcome]!.record(duration: ContinuousClock.now - start)
    }

    /// Counts an answer given before the router exactly as the router's path counts it (by
    /// outcome, latency and route), and as a fast-path answer.
    func countFastPathAnswer(_ outcome: Outcome, since start: ContinuousClock.Instant) {
        countOutcome(outcome, since: start)
        (outcome == .notModified ? collectionNotModifiedResponses : collectionOKResponses).increment()
        fastPathAnswers.increment()
    }

    /// Counts an index answer given before the router as the router counts it (by route and
    /// status), and as a fast-path answer.
    func countFastPathIndexAnswer(status: Int) {
        countResponse(route: "/v1/index", status: status)
        fastPathAnswers.increment()
    }

    /// The route label the router gives `GET …/attachments/{hash}` of a collection.
    static let attachmentRoute = "/v1/collections/{name}/attachments/{hash}"

    /// Counts a download answered before the router as the router counts it, and as a
    /// fast-path answer.
    func countFastPathAttachmentAnswer(status: Int) {
        if status == 200 { attachmentOKResponses.increment() } else { countResponse(route: Self.attachmentRoute, status: status) }
        fastPathAnswers.increment()
    }

    func countBytes(_ count: Int, for outcome: Outcome) {
        bytes[outcome]?.increment(by: count)
    }

    /// The Prometheus exposition text.
    public func render() -> String {
        registry.emitToString()
    }
}
