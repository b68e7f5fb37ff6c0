import DeltaSnapCore
import Foundation

/// Settings that make a store's history reproducible.
///
/// A store built afresh in CI would otherwise get a random epoch and the current time for
/// each commit, so a bake of the same data would differ from yesterday's.
///
/// ```swift
/// // What `deltasnap` does with SOURCE_DATE_EPOCH and DELTASNAP_EPOCH set:
/// let store = try SQLiteDatabase(path: "build.sqlite",
///                       configuration: .init(epochForNewCollections: "00000000000000a1",
///                                            fixedCommitTime: 1_700_000_000))
/// ```
public struct StoreConfiguration: Sendable, Equatable {
    /// The epoch a new collection gets instead of a random one (16 lowercase hex digits).
    public var epochForNewCollections: String?
    /// Seconds since 1970 recorded for every commit instead of the clock's time
    /// (the reproducible-builds.org `SOURCE_DATE_EPOCH` convention).
    public var fixedCommitTime: Int64?

    public init(epochForNewCollections: String? = nil, fixedCommitTime: Int64? = nil) {
        self.epochForNewCollections = epochForNewCollections
        self.fixedCommitTime = fixedCommitTime
    }

    /// Reads `SOURCE_DATE_EPOCH` and `DELTASNAP_EPOCH` from the environment.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> StoreConfiguration {
        StoreConfiguration(
            epochForNewCollections: environment["DELTASNAP_EPOCH"].flatMap { $0.isEmpty ? nil : $0 },
            fixedCommitTime: environment["SOURCE_DATE_EPOCH"].flatMap { Int64($0) })
    }

    /// The epoch of a collection or partition created now: random, or the pinned one. A review
    /// workspace's is derived from the pinned one and its path rather than equal to it: a
    /// preview device reads the workspace under the published name, and the two must never
    /// share a token (a delta answered from a published token would be the workspace's).
    public func epoch(forNew path: String) -> String {
        guard let pinned = epochForNewCollections else { return ServerToken.randomEpoch() }
        guard ReviewWorkspace.published(of: path) != nil else { return pinned }
        let hex = String(XXH64.hash(Array("\(pinned) \(path)".utf8)), radix: 16)
        return String(repeating: "0", count: 16 - hex.utf8.count) + hex
    }

    /// The time a commit records, in seconds: the pinned time or now — never before the
    /// collection's previous commit, so the version <-> time map stays monotone for
    /// `If-Modified-Since` even when the clock steps back. Every store commits by this rule.
    public func commitTime(after previous: Int64?) -> Int64 {
        max(fixedCommitTime ?? Int64(Date().timeIntervalSince1970), previous ?? .min)
    }
}
