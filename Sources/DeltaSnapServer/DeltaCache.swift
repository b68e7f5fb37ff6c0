import DeltaSnapStore
import Foundation
import Hummingbird

/// Encoded delta bodies, reused while the head they lead to is current.
///
/// A delta "since version v, up to head h" never changes, and after an update most clients
/// hold the same previous token, so they ask for the same delta: encoding and compressing it
/// once instead of per request is what makes the small-delta path cheap. Small bodies only;
/// a few dozen entries, oldest evicted first.
final class DeltaCache: @unchecked Sendable {
    struct Key: Hashable {
        var collection: String
        var base: String
        var headVersion: UInt64
        var gzip: Bool
    }

    struct Entry: Sendable {
        var head: CollectionHead
        var body: ByteBuffer
    }

    static let maximumBodyBytes = 64 * 1024
    static let maximumEntries = 64

    private let lock = NSLock()
    private var entries: [Key: Entry] = [:]
    private var order: [Key] = []

    subscript(key: Key) -> Entry? {
        lock.withLock { entries[key] }
    }

    func store(_ entry: Entry, for key: Key) {
        guard entry.body.readableBytes <= Self.maximumBodyBytes else { return }
        lock.withLock {
            if entries.updateValue(entry, forKey: key) == nil { order.append(key) }
            while order.count > Self.maximumEntries { entries[order.removeFirst()] = nil }
        }
    }
}
