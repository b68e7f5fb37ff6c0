import Foundation

/// How far compaction goes: which versions' tombstones may be dropped, so that tokens below
/// the new floor get a full body.
///
/// ```swift
/// try await store.compact("countries", policy: .keepVersions(100))   // deltas for the last 100 versions
/// try await store.compact("countries", policy: .olderThan(seconds: 30 * 86_400))
/// ```
public enum CompactionPolicy: Sendable, Equatable {
    /// Keep deltas for tokens of the last N versions.
    case keepVersions(UInt64)
    /// Compact every version committed more than this many seconds ago.
    case olderThan(seconds: Int64)
}

extension CompactionPolicy {
    /// For `.olderThan`, the commit time from which versions are kept (their first version is
    /// what ``floor(for:firstVersionKept:)`` needs); nil for `.keepVersions`.
    package func keptSince(now: Int64) -> Int64? {
        if case .olderThan(let seconds) = self { return now - seconds }
        return nil
    }

    /// The floor this policy allows for a collection at `head` (whichever store holds it).
    package func floor(for head: CollectionHead, firstVersionKept: UInt64?) -> UInt64 {
        switch self {
        case .keepVersions(let kept): head.version > kept ? head.version - kept : 0
        case .olderThan: (firstVersionKept ?? head.version + 1) - 1
        }
    }
}

/// What one compaction did.
package struct CompactionResult: Sendable, Equatable {
    package var collection: String
    package var previousFloor: UInt64
    package var floor: UInt64
    package var tombstonesRemoved: Int

    package init(collection: String, previousFloor: UInt64, floor: UInt64, tombstonesRemoved: Int) {
        self.collection = collection
        self.previousFloor = previousFloor
        self.floor = floor
        self.tombstonesRemoved = tombstonesRemoved
    }
}
