import Foundation

/// How far compaction goes: which versions' tombstones may be dropped, so that tokens below
/// the new floor get a full body.
///
/// ```swift
/// try store.compact("countries", policy: .keepVersions(100))   // deltas for the last 100 versions
/// try store.compact("countries", policy: .olderThan(seconds: 30 * 86_400))
/// ```
public enum CompactionPolicy: Sendable, Equatable {
    /// Keep deltas for tokens of the last N versions.
    case keepVersions(UInt64)
    /// Compact every version committed more than this many seconds ago.
    case olderThan(seconds: Int64)
}

/// What one compaction did.
public struct CompactionResult: Sendable, Equatable {
    public var collection: String
    public var previousFloor: UInt64
    public var floor: UInt64
    public var tombstonesRemoved: Int

    public init(collection: String, previousFloor: UInt64, floor: UInt64, tombstonesRemoved: Int) {
        self.collection = collection
        self.previousFloor = previousFloor
        self.floor = floor
        self.tombstonesRemoved = tombstonesRemoved
    }
}

extension Store {
    /// Compacts `collection` as far as `policy` allows; nil when the floor would not rise.
    public func compact(_ collection: String, policy: CompactionPolicy, now: Int64 = Int64(Date().timeIntervalSince1970)) throws -> CompactionResult? {
        guard let head = try head(of: collection) else { throw StoreError.unknownCollection(collection) }
        let target: UInt64
        switch policy {
        case .keepVersions(let kept):
            target = head.version > kept ? head.version - kept : 0
        case .olderThan(let seconds):
            let firstKept = try read { try $0.firstVersion(in: collection, committedAtOrAfter: now - seconds) }
            target = (firstKept ?? head.version + 1) - 1
        }
        guard target > head.floor else { return nil }
        let removed = try compact(collection, throughVersion: target)
        return CompactionResult(collection: collection, previousFloor: head.floor, floor: target, tombstonesRemoved: removed)
    }
}
