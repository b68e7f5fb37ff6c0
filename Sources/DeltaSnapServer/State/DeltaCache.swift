import DeltaSnapStore
import Foundation
import Hummingbird
import NIOConcurrencyHelpers

/// Encoded delta answers (headers and body), reused while the head they lead to is current.
///
/// A delta "since version v, up to head h" never changes, and after an update most clients
/// hold the same previous token, so they ask for the same delta: encoding and compressing it
/// once instead of per request is what makes the small-delta path cheap. Small bodies only;
/// a few dozen entries; past that, CLOCK forgets one not asked for since its hand last passed
/// (``BoundedCache``).
final class DeltaCache: Sendable {
    /// A delta is the same bytes exactly while its collection's epoch, head and floor are:
    /// with all three in the key, a hit needs no decision (the base was checked against
    /// that floor when the entry was read).
    struct Key: Hashable, Sendable {
        var collection: String
        var base: String
        var epoch: String
        var headVersion: UInt64
        var floor: UInt64
        var gzip: Bool

        /// The key of the delta from `base` to `head`.
        init(head: CollectionHead, base: String, gzip: Bool) {
            collection = head.name
            self.base = base
            epoch = head.epoch
            headVersion = head.version
            floor = head.floor
            self.gzip = gzip
        }
    }

    static let maximumBodyBytes = 64 * 1024
    static let maximumEntries = 64

    /// How many deltas are kept now.
    var count: Int { entries.withLockedValue { $0.count } }

    private let entries = NIOLockedValueBox(BoundedCache<Key, PollAnswer>(capacity: DeltaCache.maximumEntries))

    subscript(key: Key) -> PollAnswer? {
        entries.withLockedValue { $0.value(forKey: key) }
    }

    func store(_ entry: PollAnswer, for key: Key) {
        guard entry.body.readableBytes <= Self.maximumBodyBytes else { return }
        entries.withLockedValue { $0.set(entry, forKey: key) }
    }
}
