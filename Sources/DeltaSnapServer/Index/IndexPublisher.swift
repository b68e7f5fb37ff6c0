import Crypto
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import NIOConcurrencyHelpers
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
final class IndexPublisher: Sendable {
    struct Published: Sendable {
        /// The entries it lists, in order.
        var stated: [StatedEntry]
        /// The store's publication sequence its entries were read at: of two documents for one
        /// slot, the one read later states the later state.
        var sequence: UInt64
        var issued: Int64
        var document: ByteBuffer
        var etag: String
        /// For a view: what it was built from (see ``HeadCache/standing(of:)``).
        var dependencies: ViewDependencies?

        /// Bytes it holds, roughly: its document, and a reference and a head per entry.
        var size: Int {
            document.readableBytes + stated.count * 8 + (dependencies?.heads.count ?? 0) * 48
        }

        /// Whether it states a later state of the store than `other` (a later read), or the
        /// same one signed later.
        func isNewer(than other: Published) -> Bool {
            (sequence, issued) > (other.sequence, other.issued)
        }

        /// Whether it lists exactly the heads `keys` names, in that order.
        func lists(_ keys: [EntryKey]) -> Bool {
            stated.count == keys.count && zip(stated, keys).allSatisfy { $0.key == $1 }
        }
    }

    /// Everything the lock guards, as one plain value.
    private struct State: Sendable {
        /// By slot: a view's subject and claims; "" is the public index (a `sub` is never
        /// empty), never forgotten. Bounded by count and by bytes (a view of a thousand
        /// partitions is ~200 KB): past either, CLOCK forgets a view not polled lately
        /// (rebuilt on its next poll), so memory stays bounded however large the active
        /// users' views are.
        var published: BoundedCache<String, Published>
        /// Builds in flight, by slot: the heads each lists.
        var building: [String: (key: [EntryKey], task: Task<Published, any Error>)] = [:]
        /// Entries stated before, with their bytes (bounded: emptied when full).
        var entries: [EntryKey: StatedEntry] = [:]
    }

    private let state: NIOLockedValueBox<State>
    private let keys: [IndexSigningKey]
    private let lifetime: Int64
    private let entryCapacity = 200_000

    init(keys: [IndexSigningKey], lifetime: Int64, capacity: Int = 10_000, byteBudget: Int = 256 << 20) {
        self.keys = keys
        self.lifetime = lifetime
        state = NIOLockedValueBox(State(published: BoundedCache(capacity: capacity, costLimit: byteBudget, isPinned: { $0.isEmpty })))
    }

    /// The current document listing the heads `key` names (the heads the server answers
    /// polls with, in name order), for `subject` (nil: the public index), kept under `slot`.
    func current(
        key: [EntryKey], subject: String?, slot: String, dependencies: ViewDependencies?, store: any StoreReader, now: Int64
    ) async throws -> Published {
        let held = state.withLockedValue { $0.published.value(forKey: slot) }
        if var held, held.lists(key), isFresh(held, now: now) {
            held.dependencies = dependencies
            let kept = held
            state.withLockedValue { $0.published.set(kept, forKey: slot, cost: kept.size) }
            return kept
        }
        // One build per document at a time: a commit wakes every waiting request at once,
        // and each would otherwise read and sign the same document.
        let previous = held.map { (stated: $0.stated, sequence: $0.sequence) }
        let (task, owns) = state.withLockedValue { state -> (Task<Published, any Error>, Bool) in
            if let running = state.building[slot], running.key == key { return (running.task, false) }
            let task = Task { try await self.build(entryKeys: key, previous: previous, subject: subject, store: store, now: now) }
            state.building[slot] = (key, task)
            return (task, true)
        }
        defer { if owns { state.withLockedValue { if $0.building[slot]?.task == task { $0.building[slot] = nil } } } }
        var built = try await task.value
        built.dependencies = dependencies
        let kept = built
        return state.withLockedValue { state in
            // Builds for one slot overlap (each request whose heads differ starts one), and the
            // one that read earlier may finish last: the later state is kept and answered, so
            // no client is handed a document older than one already served (guarantee 2).
            if let held = state.published.peek(slot), held.isNewer(than: kept) { return held }
            state.published.set(kept, forKey: slot, cost: kept.size)
            return kept
        }
    }

    /// The public index as last built, when it lists exactly `heads` and needs no
    /// re-signing: read without waiting (the fast path parks requests on it).
    func freshPublic(heads: [CollectionHead], now: Int64) -> Published? {
        guard let held = state.withLockedValue({ $0.published.peek("") }), isFresh(held, now: now), held.stated.count == heads.count else { return nil }
        for (stated, head) in zip(held.stated, heads) where stated.key != EntryKey(head) { return nil }
        return held
    }

    /// The view under `slot` was found still to hold at head change count `at`.
    func noteStillHolds(slot: String, at: UInt64) {
        state.withLockedValue { state in
            state.published.modify(slot) { published in
                guard let heldAt = published.dependencies?.heldAt, heldAt < at else { return }
                published.dependencies?.heldAt = at
            }
        }
    }

    /// The document kept under `slot` as last built, however old: a view's dependencies
    /// tell what it lists even when it is due for re-signing.
    func kept(for slot: String) -> Published? {
        state.withLockedValue { $0.published.value(forKey: slot) }
    }

    /// The age in seconds past which a document is signed again (a quarter of its lifetime),
    /// so a client always gets one far from its expiry.
    var resigningAge: Int64 { lifetime / 4 }

    /// Whether `document` may still be served as it is at `now`: younger than
    /// ``resigningAge``. The one place the re-signing rule is written.
    func isFresh(_ document: Published, now: Int64) -> Bool {
        now - document.issued < resigningAge
    }

    /// An entry's key and canonical bytes (``IndexDocument/member(of:)``), made once: a
    /// class, so listing it in a thousand-entry document costs one reference each. Only the
    /// bytes are kept of the entry: a server keeps one per partition in use.
    final class StatedEntry: Sendable {
        let key: EntryKey
        let member: [UInt8]
        /// The name the document states: the key's, but a review workspace (a preview
        /// device's view, PROTOCOL.md §13.5) is stated as the collection it will be published as.
        let statedName: String

        /// `expected`: the key the entry was read for, whose epoch text the key shares.
        init(_ entry: SignedIndex.Entry, expected: EntryKey?) {
            key = EntryKey(entry, sharing: expected)
            var stated = entry
            stated.collection = ReviewWorkspace.published(of: entry.collection) ?? entry.collection
            statedName = stated.collection
            member = IndexDocument.member(of: stated)
        }
    }

    /// Confirms every head it lists in one read transaction of `store`, and makes and
    /// serialises only the entries not stated before: a document states one state of the
    /// store, so the collections one commit changed are listed together, at that commit or
    /// before it (PROTOCOL §8.1). The heads asked for only say which entries to list: they may
    /// mix commits (a body read installs its own collection's head before the change watcher
    /// reports the others of its commit), so an entry stated before is listed again only
    /// where that read confirms its head. A confirmed entry — a token and the digest of its
    /// state, which never change — is copied as bytes. A view of a thousand partitions of
    /// which one changed asks the store what moved since its previous document (on SQLite an
    /// indexed read of the names moved; PostgreSQL reads the thousand heads in one query) and
    /// makes, hashes and serialises one entry.
    private func build(
        entryKeys: [EntryKey], previous: (stated: [StatedEntry], sequence: UInt64)?, subject: String?, store: any StoreReader, now: Int64
    ) async throws -> Published {
        var asked: [String: EntryKey] = [:]
        asked.reserveCapacity(entryKeys.count)
        for key in entryKeys { asked[key.name] = key }
        // What is stated already of the heads asked for: the read confirms or replaces each.
        // The slot's previous document states each of its heads at its sequence, so the store
        // need only say which of them moved since (a changed view reads what changed); a
        // first document takes the entries other documents made, each head read to confirm it.
        var known: [String: StatedEntry] = [:]
        known.reserveCapacity(entryKeys.count)
        var statedAt: UInt64?
        if let previous, !previous.stated.isEmpty {
            var previousByName: [String: StatedEntry] = [:]
            previousByName.reserveCapacity(previous.stated.count)
            for stated in previous.stated { previousByName[stated.key.name] = stated }
            for key in entryKeys { if let stated = previousByName[key.name] { known[key.name] = stated } }
            statedAt = previous.sequence
        } else {
            state.withLockedValue { state in
                for key in entryKeys { if let stated = state.entries[key] { known[key.name] = stated } }
            }
        }
        let read = try await store.publishedState(
            of: entryKeys.map(\.name), confirming: known.mapValues { PublishedHead(epoch: $0.key.epoch, version: $0.key.version, floor: $0.key.floor) },
            statedAt: statedAt)
        var fresh: [String: StatedEntry] = [:]
        state.withLockedValue { state in
            for entry in read.entries {
                let key = EntryKey(entry, sharing: asked[entry.collection])
                fresh[entry.collection] = state.entries[key] ?? StatedEntry(entry, expected: asked[entry.collection])
            }
            if state.entries.count + fresh.count > entryCapacity { state.entries.removeAll(keepingCapacity: true) }
            for stated in fresh.values { state.entries[stated.key] = stated }
        }
        var listed = entryKeys.compactMap { key in read.confirmed.contains(key.name) ? known[key.name] : fresh[key.name] }
        // Canonical JSON orders members by their UTF-8 bytes; the store reads them in that order
        // (but where a preview device's view states a workspace under another name).
        if !zip(listed, listed.dropFirst()).allSatisfy({ $0.statedName.utf8Precedes($1.statedName) }) {
            listed.sort { $0.statedName.utf8Precedes($1.statedName) }
        }
        let index = IndexDocument.index(
            sequence: read.sequence, issued: now, expires: now + lifetime, subject: subject, members: listed.map(\.member))
        let document = IndexDocument.signed(index: index, keys: keys)
        let etag = "\"" + SHA256.hash(data: document).prefix(12).map { String(format: "%02x", $0) }.joined() + "\""
        return Published(stated: listed, sequence: read.sequence, issued: now, document: ByteBuffer(bytes: document), etag: etag)
    }
}

/// One entry of a document as a head names it: compared and hashed on every poll that
/// rebuilds a document, so no text is formatted for it.
struct EntryKey: Hashable, Sendable {
    var name: String
    var epoch: String
    var version: UInt64
    var floor: UInt64

    init(_ head: CollectionHead) {
        (name, epoch, version, floor) = (head.name, head.epoch, head.version, head.floor)
    }

    init(name: String, token: ServerToken, floor: UInt64) {
        (self.name, epoch, version, self.floor) = (name, token.epoch, token.version, floor)
    }

    /// An entry's token is `EPOCH.VERSION` (``ServerToken``). The epoch is `sharing`'s text
    /// when they are equal: one copy of it in memory, not one per key.
    init(_ entry: SignedIndex.Entry, sharing: EntryKey?) {
        (name, version, floor) = (entry.collection, entry.version, entry.floor)
        let parsed = ServerToken(entry.token)?.epoch ?? entry.token
        epoch = parsed == sharing?.epoch ? sharing!.epoch : parsed
    }
}
