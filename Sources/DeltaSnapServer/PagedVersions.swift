import DeltaSnapCore
import DeltaSnapStore
import Foundation
import NIOCore

/// The versions clients page through (`…/snapshots/{token}?limit=N&after=ID`,
/// docs/PROTOCOL.md §8.6): a page of version *v* never shifts, however many writes follow.
///
/// The store keeps only the newest value of each record, so a version's records are read
/// once, in one read transaction, when its first page is asked for (it must be the head
/// then), and kept here while pages of it are asked for — the way Quizlet kept a listing's
/// ids in memcached. Kept versions are bounded by bytes (the least recently paged is
/// dropped first) and by idle time; a page of a version no longer kept is `404 superseded`,
/// and the client starts again from the new head.
final class PagedVersions: @unchecked Sendable {
    /// One version's records in id order: their canonical bytes, end to end, and where each
    /// ends.
    final class Version: Sendable {
        let head: CollectionHead
        let ids: [String]
        let bytes: [UInt8]
        /// `ends[i]`: where record `i`'s bytes end in ``bytes``.
        let ends: [Int]

        /// Bytes held, roughly.
        let size: Int

        init(head: CollectionHead, ids: [String], bytes: [UInt8], ends: [Int]) {
            self.head = head
            self.ids = ids
            self.bytes = bytes
            self.ends = ends
            size = bytes.count + ids.reduce(0) { $0 + $1.utf8.count + 16 } + ends.count * 8
        }

        /// The index of the first record whose id comes after `id` (UTF-8 order, as bodies sort).
        func firstIndex(after id: String?) -> Int {
            guard let id else { return 0 }
            var low = 0
            var high = ids.count
            while low < high {
                let middle = (low + high) / 2
                if id.utf8Precedes(ids[middle]) { high = middle } else { low = middle + 1 }
            }
            return low
        }

        /// The document of one page: up to `limit` records after `after`.
        func page(after: String?, limit: Int) -> ByteBuffer {
            let start = firstIndex(after: after)
            let end = min(ids.count, start + limit)
            var out = ByteBuffer()
            var text: [UInt8] = Array("{\"collection\":".utf8)
            CanonicalJSON.writeString(head.name, into: &text)
            text += Array(",\"token\":\"\(head.token)\",\"count\":\(head.count),\"next\":".utf8)
            if end < ids.count && end > start { CanonicalJSON.writeString(ids[end - 1], into: &text) } else { text += Array("null".utf8) }
            text += Array(",\"records\":[".utf8)
            out.writeBytes(text)
            for index in start..<end {
                out.writeString(index == start ? "\n" : ",\n")
                out.writeBytes(bytes[(index == 0 ? 0 : ends[index - 1])..<ends[index]])
            }
            out.writeString("\n]}\n")
            return out
        }
    }

    private let lock = NSLock()
    private var kept: [String: (version: Version, lastUsed: ContinuousClock.Instant)] = [:]
    private var keptBytes = 0
    let budgetBytes: Int
    let idleLifetime: Duration

    init(budgetBytes: Int = 64 << 20, idleLifetime: Duration = .seconds(600)) {
        self.budgetBytes = budgetBytes
        self.idleLifetime = idleLifetime
    }

    /// The version `token` of `name`: kept, or read now from `store` if it is the head
    /// `current`. Nil when it is neither (superseded and not kept).
    func version(of name: String, token: String, current: CollectionHead, store: any CollectionStore) async throws -> Version? {
        let key = name + "\u{0}" + token
        let now = ContinuousClock.now
        if let held = lock.withLock({ () -> Version? in
            dropIdle(now: now)
            guard let held = kept[key] else { return nil }
            kept[key]?.lastUsed = now
            return held.version
        }) {
            return held
        }
        guard current.token.description == token else { return nil }
        let source = try await store.openRecords(in: name, after: nil)
        var ids: [String] = []
        var bytes: [UInt8] = []
        var ends: [Int] = []
        ids.reserveCapacity(source.count)
        ends.reserveCapacity(source.count)
        do {
            // The read transaction's head: another commit may have landed since `current`.
            guard source.head.token.description == token else {
                await source.close()
                return nil
            }
            while try await source.next({ record in
                bytes.append(contentsOf: record)
                ends.append(bytes.count)
                ids.append(try Record.parse(Array(record)).id)
            }) {}
        } catch {
            await source.close()
            throw error
        }
        let version = Version(head: source.head, ids: ids, bytes: bytes, ends: ends)
        await source.close()
        lock.withLock { keep(version, key: key, now: now) }
        return version
    }

    /// Under the lock.
    private func keep(_ version: Version, key: String, now: ContinuousClock.Instant) {
        guard kept[key] == nil else { return }
        let size = version.size
        // A version larger than the whole budget is answered once, not kept.
        guard size <= budgetBytes else { return }
        while keptBytes + size > budgetBytes, let oldest = kept.min(by: { $0.value.lastUsed < $1.value.lastUsed }) {
            keptBytes -= oldest.value.version.size
            kept[oldest.key] = nil
        }
        kept[key] = (version, now)
        keptBytes += size
    }

    /// Under the lock.
    private func dropIdle(now: ContinuousClock.Instant) {
        for (key, held) in kept where now - held.lastUsed > idleLifetime {
            keptBytes -= held.version.size
            kept[key] = nil
        }
    }
}
