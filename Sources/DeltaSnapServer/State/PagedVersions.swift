import DeltaSnapCore
import DeltaSnapStore
import Foundation
import NIOCore
import NIOConcurrencyHelpers

/// The versions clients page through (`…/snapshots/{token}?limit=N&after=ID`,
/// docs/PROTOCOL.md §8.6): a page of version *v* never shifts, however many writes follow.
///
/// The store keeps only the newest value of each record, so a version's records are read
/// once, in one read transaction, when its first page is asked for (it must be the head
/// then), and kept here while pages of it are asked for — the way Quizlet kept a listing's
/// ids in memcached. Kept versions are bounded by bytes (the least recently paged is
/// dropped first) and by idle time; a page of a version no longer kept is `404 superseded`,
/// and the client starts again from the new head. A version larger than the whole budget is
/// never kept: its pages are read from the store by their ids, one page at a time, while it
/// is the head.
final class PagedVersions: Sendable {
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
            let records = (start..<end).lazy.map { self.bytes[($0 == 0 ? 0 : self.ends[$0 - 1])..<self.ends[$0]] }
            return PagedVersions.document(of: head, records: records, next: end < ids.count && end > start ? ids[end - 1] : nil)
        }
    }

    /// A page's document: the version it belongs to, the `next` to ask for (nil: the last
    /// page), and its records' canonical bytes.
    static func document(of head: CollectionHead, records: some Sequence<ArraySlice<UInt8>>, next: String?) -> ByteBuffer {
        var out = ByteBuffer()
        var text: [UInt8] = Array("{\"collection\":".utf8)
        // A workspace's pages (a preview device's) name the collection it will be published as.
        CanonicalJSON.writeString(ReviewWorkspace.published(of: head.name) ?? head.name, into: &text)
        text += Array(",\"token\":\"\(head.token)\",\"count\":\(head.count),\"next\":".utf8)
        if let next { CanonicalJSON.writeString(next, into: &text) } else { text += Array("null".utf8) }
        text += Array(",\"records\":[".utf8)
        out.writeBytes(text)
        for (position, record) in records.enumerated() {
            out.writeString(position == 0 ? "\n" : ",\n")
            out.writeBytes(record)
        }
        out.writeString("\n]}\n")
        return out
    }

    /// Everything the lock guards, as one plain value.
    private struct State: Sendable {
        var kept: [String: (version: Version, lastUsed: ContinuousClock.Instant)] = [:]
        var keptBytes = 0
        /// Versions found larger than the budget, by "name NUL token": paged from the store.
        var oversized = Set<String>()

        /// Bounded: names of versions long gone are not kept for ever.
        mutating func remember(oversized key: String) {
            if oversized.count >= 1_000 { oversized.removeAll() }
            oversized.insert(key)
        }

        /// False when it is too large to keep at all (`budgetBytes`).
        @discardableResult
        mutating func keep(_ version: Version, key: String, now: ContinuousClock.Instant, budgetBytes: Int) -> Bool {
            guard kept[key] == nil else { return true }
            let size = version.size
            // Its records fit in the budget (the reader checks), with its ids perhaps not.
            guard size <= budgetBytes else { return false }
            while keptBytes + size > budgetBytes, let oldest = kept.min(by: { $0.value.lastUsed < $1.value.lastUsed }) {
                keptBytes -= oldest.value.version.size
                kept[oldest.key] = nil
            }
            kept[key] = (version, now)
            keptBytes += size
            return true
        }

        mutating func dropIdle(now: ContinuousClock.Instant, idleLifetime: Duration) {
            for (key, held) in kept where now - held.lastUsed > idleLifetime {
                keptBytes -= held.version.size
                kept[key] = nil
            }
        }
    }

    private let state = NIOLockedValueBox(State())
    let budgetBytes: Int
    let idleLifetime: Duration

    init(budgetBytes: Int = 64 << 20, idleLifetime: Duration = .seconds(600)) {
        self.budgetBytes = budgetBytes
        self.idleLifetime = idleLifetime
    }

    /// One page of version `token` of `name`: up to `limit` records after the id `after`.
    /// Nil when that version is neither kept nor the head `current` (superseded).
    func page(
        of name: String, token: String, current: CollectionHead, after: String?, limit: Int, store: any StoreReader
    ) async throws -> ByteBuffer? {
        let key = name + "\u{0}" + token
        let now = ContinuousClock.now
        let idleLifetime = idleLifetime
        let (held, isOversized) = state.withLockedValue { state -> (Version?, Bool) in
            state.dropIdle(now: now, idleLifetime: idleLifetime)
            guard state.kept[key] != nil else { return (nil, state.oversized.contains(key)) }
            state.kept[key]?.lastUsed = now
            return (state.kept[key]?.version, false)
        }
        if let held { return held.page(after: after, limit: limit) }
        guard current.token.description == token else { return nil }
        if !isOversized {
            switch try await read(name, token: token, now: now, store: store) {
            case .superseded: return nil
            case .read(let version): return version.page(after: after, limit: limit)
            case .oversized: state.withLockedValue { $0.remember(oversized: key) }
            }
        }
        return try await pageFromStore(name, token: token, after: after, limit: limit, store: store)
    }

    private enum Reading {
        case read(Version)
        case superseded
        /// Larger than the whole budget: given up part way, not held.
        case oversized
    }

    /// Reads the version `token` of `name` whole, in one read transaction, and keeps it.
    private func read(_ name: String, token: String, now: ContinuousClock.Instant, store: any StoreReader) async throws -> Reading {
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
                return .superseded
            }
            while try await source.next({ record in
                bytes.append(contentsOf: record)
                ends.append(bytes.count)
                ids.append(try Record.parse(Array(record)).id)
            }) {
                if bytes.count > budgetBytes {
                    await source.close()
                    return .oversized
                }
            }
        } catch {
            await source.close()
            throw error
        }
        let version = Version(head: source.head, ids: ids, bytes: bytes, ends: ends)
        await source.close()
        let budgetBytes = budgetBytes
        state.withLockedValue { state in
            let key = name + "\u{0}" + token
            if !state.keep(version, key: key, now: now, budgetBytes: budgetBytes) { state.remember(oversized: key) }
        }
        return .read(version)
    }

    /// A page of a version too large to keep, read by its ids while it is the head: a range
    /// of the primary key, so each page costs its own size, not the version's.
    private func pageFromStore(_ name: String, token: String, after: String?, limit: Int, store: any StoreReader) async throws -> ByteBuffer? {
        // One more than the page: whether another page follows.
        let source = try await store.openPage(of: name, after: after, limit: limit + 1)
        var records: [(id: String, bytes: [UInt8])] = []
        do {
            guard source.head.token.description == token else {
                await source.close()
                return nil
            }
            while try await source.next({ record in
                let bytes = Array(record)
                records.append((try Record.parse(bytes).id, bytes))
            }) {}
        } catch {
            await source.close()
            throw error
        }
        await source.close()
        let page = records.prefix(limit)
        return Self.document(of: source.head, records: page.map { $0.bytes[...] }, next: records.count > limit ? page.last?.id : nil)
    }
}
