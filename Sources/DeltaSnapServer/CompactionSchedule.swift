import Foundation
import DeltaSnapStore
import Logging

/// Compaction the server runs by itself: every `interval`, every collection, as far as
/// `policy` allows (`serve --compact-keep-versions N` or `--compact-older-than DAYS`).
///
/// ```swift
/// var configuration = DeltaSnapServerConfiguration()
/// configuration.compaction = CompactionSchedule(policy: .keepVersions(1_000), interval: .seconds(3_600))
/// ```
public struct CompactionSchedule: Sendable {
    public var policy: CompactionPolicy
    public var interval: Duration
    /// Seconds a blob no record refers to is kept before a round removes it.
    public var attachmentGraceSeconds: Int64

    /// Seven days: a blob uploaded for a write still under way is not taken from under it.
    public static let defaultAttachmentGraceSeconds: Int64 = AttachmentGarbage.defaultGraceSeconds

    public init(policy: CompactionPolicy, interval: Duration = .seconds(3_600), attachmentGraceSeconds: Int64 = CompactionSchedule.defaultAttachmentGraceSeconds) {
        self.policy = policy
        self.interval = interval
        self.attachmentGraceSeconds = attachmentGraceSeconds
    }
}

extension DeltaSnapAPI {
    /// Compacts every collection on `schedule` until cancelled; each compaction is logged.
    /// The new floors reach the heads through the change watcher (another connection's
    /// commit), so no poll is answered from a floor older than the store's for long.
    public func runCompaction(_ schedule: CompactionSchedule, logger: Logger) async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: schedule.interval)
            } catch {
                return
            }
            for served in heads.all {
                let name = served.head.name
                do {
                    guard let result = try await store.compact(name, policy: schedule.policy) else { continue }
                    logger.info("compacted", metadata: [
                        "collection": .string(name), "floor": .stringConvertible(result.floor),
                        "previous_floor": .stringConvertible(result.previousFloor), "tombstones_removed": .stringConvertible(result.tombstonesRemoved),
                    ])
                } catch {
                    logger.error("compaction failed", metadata: ["collection": .string(name), "error": "\(error)"])
                }
            }
            do {
                let garbage = try await store.collectAttachmentGarbage(
                    unreferencedFor: schedule.attachmentGraceSeconds, now: Int64(Date().timeIntervalSince1970))
                if garbage.removed > 0 || garbage.waiting > 0 {
                    logger.info("attachments collected", metadata: [
                        "removed": .stringConvertible(garbage.removed), "bytes_removed": .stringConvertible(garbage.bytesRemoved),
                        "waiting": .stringConvertible(garbage.waiting),
                    ])
                }
            } catch {
                logger.error("attachment collection failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
