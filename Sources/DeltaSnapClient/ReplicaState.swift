import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// What the replica knows about its collection besides the records, stored with them.
public struct ReplicaState: Sendable, Equatable {
    /// The `ETag` exactly as last received (quotes included); sent back as `If-None-Match`.
    public var etag: String?
    /// The `Last-Modified` exactly as last received; sent back as `If-Modified-Since`.
    public var lastModified: String?
    /// The body `token` of the state held (compared with a delta's `base`, never parsed).
    public var token: String?
    /// The checksum of the records held, maintained as they change.
    public var checksum: StateChecksum
    /// Visible records held.
    public var count: Int
    /// When a sync last succeeded (a 304 counts).
    public var lastSuccessfulSync: Date?
    /// The reason the last sync failed, cleared by a success.
    public var lastError: String?
    /// Since when syncs have been failing without a success in between.
    public var failingSince: Date?
    /// Consecutive failed syncs.
    public var consecutiveFailures: Int
    /// No request before this time (backoff, `Retry-After`, `Backoff`).
    public var notBefore: Date?
    /// The LtHash16 digest of the records held, maintained like ``checksum`` once the replica
    /// verifies signed data (nil before).
    public var digest: StateDigest?
    /// The sequence of the newest signed index verified: an older one is a replay.
    public var indexSequence: UInt64?
    /// When that index expires: past it (and no newer one verified), the data is
    /// unverifiably old (``SyncStatus/unverifiablyOld``).
    public var indexExpires: Date?

    public static let empty = ReplicaState(
        etag: nil, lastModified: nil, token: nil, checksum: .empty, count: 0, lastSuccessfulSync: nil,
        lastError: nil, failingSince: nil, consecutiveFailures: 0, notBefore: nil,
        digest: nil, indexSequence: nil, indexExpires: nil)

    /// Whether the replica holds a verified state (possibly of zero records).
    public var hasData: Bool { token != nil }
}
