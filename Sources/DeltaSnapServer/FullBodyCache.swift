import DeltaSnapStore
import Foundation
import Hummingbird
import NIOConcurrencyHelpers

/// Full gzip bodies built once per collection version and then sent as they are.
///
/// Built at zlib level 6, the level `bake` uses, so the cached body is byte-identical to a
/// snapshot baked from the same state.
final class FullBodyCache: Sendable {
    struct Entry: Sendable {
        var head: CollectionHead
        var gzip: ByteBuffer
    }

    /// One per collection (and partition) polled for a full body, replaced by its next version.
    private let entries = NIOLockedValueBox<[String: Entry]>([:])

    /// The body of `collection` at `head`'s version, building it (outside the lock) when
    /// missing or stale. Two first requests may both build; either result is correct.
    func body(for head: CollectionHead, store: any CollectionStore) async throws -> Entry {
        if let entry = entries.withLockedValue({ $0[head.name] }), entry.head.version >= head.version, entry.head.epoch == head.epoch {
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
            if let current = entries[head.name], current.head.version > entry.head.version { return }
            entries[head.name] = entry
        }
        return entry
    }
}
