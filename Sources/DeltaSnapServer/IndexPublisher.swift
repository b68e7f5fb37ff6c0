import Crypto
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import NIOCore

/// Builds, signs and keeps the documents served at `GET /v1/index`: the public index, and
/// each user's view (their partitions with the public collections).
///
/// A document is rebuilt when a head or floor it lists changes and re-signed when a quarter
/// of its lifetime has passed, so a client always gets an index that is current and far
/// from expiry, while a cache sees a new document (and a new `ETag`) only then: a poll of
/// an unchanged view costs no signing and no read. Every entry is read from the store in
/// one read transaction, so a digest always belongs to the token next to it. Views are kept
/// for the most recent users only (a bounded cache), so memory grows with active users.
final class IndexPublisher: @unchecked Sendable {
    struct Published: Sendable {
        /// Which heads it was built from: "name token floor" per collection.
        var key: [String]
        var issued: Int64
        var document: ByteBuffer
        var etag: String
        /// For a view: what it was built from (see ``HeadCache/stillHolds(_:)``).
        var dependencies: ViewDependencies?
    }

    private let lock = NSLock()
    private let keys: [IndexSigningKey]
    private let lifetime: Int64
    private let capacity: Int
    /// By slot: a view's subject and claims; "" is the public index (a `sub` is never empty).
    private var published: [String: Published] = [:]
    /// Builds in flight, by slot and key.
    private var building: [String: Task<Published, any Error>] = [:]
    /// Entries stated before, by "name token floor" (bounded: emptied when full).
    private var entries: [String: SignedIndex.Entry] = [:]
    private let entryCapacity = 200_000

    init(keys: [IndexSigningKey], lifetime: Int64, capacity: Int = 10_000) {
        self.keys = keys
        self.lifetime = lifetime
        self.capacity = capacity
    }

    /// The current document listing `heads` (the heads the server answers polls with), for
    /// `subject` (nil: the public index), kept under `slot`.
    func current(
        heads: [CollectionHead], subject: String?, slot: String, dependencies: ViewDependencies?, store: any CollectionStore, now: Int64
    ) async throws -> Published {
        let key = heads.map { "\($0.name) \($0.token) \($0.floor)" }
        if var published = lock.withLock({ published[slot] }), published.key == key, now - published.issued < lifetime / 4 {
            published.dependencies = dependencies
            let kept = published
            lock.withLock { self.published[slot] = kept }
            return kept
        }
        // One build per document at a time: a commit wakes every waiting request at once,
        // and each would otherwise read and sign the same document.
        let flight = slot + "\u{1}" + key.joined(separator: "\u{2}")
        let (task, owns) = lock.withLock { () -> (Task<Published, any Error>, Bool) in
            if let running = building[flight] { return (running, false) }
            let task = Task { try await self.build(heads: heads, headKeys: key, subject: subject, store: store, now: now) }
            building[flight] = task
            return (task, true)
        }
        defer { if owns { lock.withLock { building[flight] = nil } } }
        var built = try await task.value
        built.dependencies = dependencies
        lock.withLock {
            // Two requests may build at once; keep the newer one.
            if let held = published[slot], held.issued > built.issued { return }
            if published.count >= capacity, published[slot] == nil, let victim = published.keys.first(where: { !$0.isEmpty }) {
                published[victim] = nil
            }
            published[slot] = built
        }
        return built
    }

    /// The public index as last built, when it lists exactly `heads` and needs no
    /// re-signing: read without waiting (the fast path parks requests on it).
    func freshPublic(heads: [CollectionHead], now: Int64) -> Published? {
        guard let held = lock.withLock({ published[""] }), now - held.issued < lifetime / 4, held.key.count == heads.count else { return nil }
        for (entry, head) in zip(held.key, heads) where entry != "\(head.name) \(head.token) \(head.floor)" { return nil }
        return held
    }

    /// The view under `slot` was found still to hold at head change count `at`.
    func noteStillHolds(slot: String, at: UInt64) {
        lock.withLock {
            guard var dependencies = published[slot]?.dependencies, dependencies.heldAt < at else { return }
            dependencies.heldAt = at
            published[slot]?.dependencies = dependencies
        }
    }

    /// The view kept under `slot` as last built, while it needs no re-signing.
    func cached(for slot: String, now: Int64) -> Published? {
        guard let held = lock.withLock({ published[slot] }), now - held.issued < lifetime / 4 else { return nil }
        return held
    }

    /// Reads (from `store`) only the entries not stated before: an entry — a token and the
    /// digest of its state — never changes, so a view of a thousand partitions of which one
    /// changed reads one. The sequence is read every time.
    private func build(heads: [CollectionHead], headKeys: [String], subject: String?, store: any CollectionStore, now: Int64) async throws -> Published {
        let known = lock.withLock { headKeys.map { entries[$0] } }
        let missing = zip(heads, known).compactMap { $1 == nil ? $0.name : nil }
        let read = try await store.publishedState(of: missing)
        let fresh = Dictionary(read.entries.map { ($0.collection, $0) }, uniquingKeysWith: { $1 })
        // A read entry may be newer than the head asked for (a commit since): it is what the
        // store states now, and the published key says so.
        let listed = zip(heads, known).compactMap { head, known in known ?? fresh[head.name] }
        lock.withLock {
            if entries.count + read.entries.count > entryCapacity { entries.removeAll(keepingCapacity: true) }
            for entry in read.entries { entries[Self.key(of: entry)] = entry }
        }
        let index = SignedIndex(sequence: read.sequence, issued: now, expires: now + lifetime, entries: listed, subject: subject)
        let document = index.signedDocument(with: keys)
        let etag = "\"" + SHA256.hash(data: document).prefix(12).map { String(format: "%02x", $0) }.joined() + "\""
        return Published(key: listed.map(Self.key), issued: now, document: ByteBuffer(bytes: document), etag: etag)
    }

    private static func key(of entry: SignedIndex.Entry) -> String {
        "\(entry.collection) \(entry.token) \(entry.floor)"
    }
}
