import DeltaSnapCore
import DeltaSnapTrust

/// The state of a collection at its newest committed version.
///
/// ```swift
/// if let head = try store.head(of: "countries") {
///     print(head.token, head.count, head.checksum)   // 5f3c9a0e12ab34cd.3 249 9f3c…
/// }
/// ```
package struct CollectionHead: Sendable, Equatable {
    package var name: String
    /// Random per collection store; tokens of another epoch get a full body.
    package var epoch: String
    /// The newest committed version (1 for the first commit).
    package var version: UInt64
    package var checksum: StateChecksum
    /// Visible records.
    package var count: Int
    /// Seconds since 1970 of the newest commit.
    package var committedAt: Int64
    /// Tokens of a version below this may have missed a compacted tombstone: they get a full body.
    package var floor: UInt64

    package var token: ServerToken { ServerToken(epoch: epoch, version: version) }
    package var lastModified: String { HTTPDate.format(committedAt) }

    package init(name: String, epoch: String, version: UInt64, checksum: StateChecksum, count: Int, committedAt: Int64, floor: UInt64) {
        self.name = name
        self.epoch = epoch
        self.version = version
        self.checksum = checksum
        self.count = count
        self.committedAt = committedAt
        self.floor = floor
    }
}

extension SignedIndex.Entry {
    /// What the index states about a collection at `head` whose state digest is `digest`
    /// (the same entry from either store).
    package init(head: CollectionHead, digest: StateDigest) {
        self.init(
            collection: head.name, token: head.token.description, version: head.version, count: head.count,
            floor: head.floor, digest: digest.fingerprint, lastModified: head.lastModified)
    }
}
