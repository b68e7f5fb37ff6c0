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
    package var digest: StateDigest?
    /// The sequence of the newest signed index verified: an older one is a replay.
    public var indexSequence: UInt64?
    /// When that index expires: past it (and no newer one verified), the data is
    /// unverifiably old (``SyncStatus/unverifiablyOld``).
    public var indexExpires: Date?
    /// No request before this time because the *server* asked (`Retry-After`, `Backoff`),
    /// as opposed to the replica's own backoff after failures; kept across restarts, so a
    /// tool run again at once still waits (docs/PROTOCOL.md §6).
    public var serverNotBefore: Date?
    /// The collection this replica holds, set at its first sync: a replica never syncs another.
    public var collection: String?
    /// The collection URL of its last successful sync: a replica never pushes its queued
    /// writes to, or takes its data from, another server (scheme and host) unless told it moved.
    public var server: String?

    public static let empty = ReplicaState(
        etag: nil, lastModified: nil, token: nil, checksum: .empty, count: 0, lastSuccessfulSync: nil,
        lastError: nil, failingSince: nil, consecutiveFailures: 0, notBefore: nil,
        digest: nil, indexSequence: nil, indexExpires: nil)

    package init(
        etag: String?, lastModified: String?, token: String?, checksum: StateChecksum, count: Int, lastSuccessfulSync: Date?,
        lastError: String?, failingSince: Date?, consecutiveFailures: Int, notBefore: Date?,
        digest: StateDigest?, indexSequence: UInt64?, indexExpires: Date?, serverNotBefore: Date? = nil,
        collection: String? = nil, server: String? = nil
    ) {
        self.etag = etag
        self.lastModified = lastModified
        self.token = token
        self.checksum = checksum
        self.count = count
        self.lastSuccessfulSync = lastSuccessfulSync
        self.lastError = lastError
        self.failingSince = failingSince
        self.consecutiveFailures = consecutiveFailures
        self.notBefore = notBefore
        self.digest = digest
        self.indexSequence = indexSequence
        self.indexExpires = indexExpires
        self.serverNotBefore = serverNotBefore
        self.collection = collection
        self.server = server
    }

    /// Whether the replica holds a verified state (possibly of zero records).
    public var hasData: Bool { token != nil }

    /// Takes a signed index just verified (docs/PROTOCOL.md §8.4): a higher sequence moves
    /// both the sequence and the expiry; the same sequence (the same signed state, re-signed
    /// later or replayed) can only move the expiry forward, so a replayed older copy never
    /// shortens what the client accepts and nothing but a newer signature extends it.
    public mutating func acceptIndex(sequence: UInt64, expires: Date) {
        if let held = indexSequence, held == sequence {
            indexExpires = max(indexExpires ?? expires, expires)
        } else {
            indexSequence = sequence
            indexExpires = expires
        }
    }
}
