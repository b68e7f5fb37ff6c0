import Metrics

/// What `deltasnap follow` measures (swift-metrics; exported where the process bootstraps a
/// backend): how far the slot holds back the source's WAL, and how long a source commit
/// takes to be published.
enum FollowMetrics {
    static let slotLagBytes = Gauge(label: "deltasnap_follow_slot_lag_bytes")
    static let commitLag = Timer(label: "deltasnap_follow_commit_lag_seconds")
    static let rows = Counter(label: "deltasnap_follow_rows_total")

    static func record(commitLag seconds: Double, rows count: Int) {
        commitLag.recordSeconds(seconds)
        rows.increment(by: count)
    }
}
