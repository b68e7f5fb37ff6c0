import DeltaSnapStore
import Foundation
import Hummingbird
import NIOConcurrencyHelpers

/// Full gzip bodies built once per collection version and then sent as they are.
///
/// Built at zlib level 6, the level `bake` uses, so the cached body is byte-identical to a
/// snapshot baked from the same state. Bounded by count and by bytes (``BoundedCache``): a
/// store may hold millions of partitions, and each polled for a full body once would
/// otherwise keep its body for ever; one forgotten is built again on its next full poll.
final class FullBodyCache: Sendable {
    struct Entry: Sendable {
        var head: CollectionHead
        var gzip: ByteBuffer
    }

    /// One per collection (and partition) polled for a full body lately, replaced by its next
    /// version.
    private let entries: NIOLockedValueBox<BoundedCache<String, Entry>>

    init(capacity: Int = 10_000, byteBudget: Int = 256 << 20) {
        entries = NIOLockedValueBox(BoundedCache(capacity: capacity, costLimit: byteBudget))
    }

    /// Bytes of the bodies kept now.
    var keptBytes: Int { entries.withLockedValue { $0.totalCost } }

    /// The body of `collection` at `head`'s version, building it (outside the lock) when
    /// missing or stale. Two first requests may both build; either result is correct.
    func body(for head: CollectionHead, store: any StoreReader) async throws -> Entry {
        if let entry = entries.withLockedValue({ $0.value(forKey: head.name) }), entry.head.version >= head.version, entry.head.epoch == head.epoch {
            return entry
        }
        let source = try await store.openRecords(in: head.name, after: nil)
        let streamer: BodyStreamer
        do {
            streamer = try BodyStreamer(source: source, base: nil, gzipLevel: 6)
        } catch {
            await source.close()
            throw error
        }
        let entry = Entry(head: streamer.head, gzip: try await streamer.readAll())
        entries.withLockedValue { entries in
            if let current = entries.peek(head.name), current.head.version > entry.head.version { return }
            entries.set(entry, forKey: head.name, cost: entry.gzip.readableBytes)
        }
        return entry
    }
}
