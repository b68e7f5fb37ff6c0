import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust

extension SQLiteReader {
    /// What a signed index states about `names` (every collection when nil; names that do
    /// not exist are left out), read in this one transaction so each digest belongs to the
    /// token next to it.
    ///
    /// ```swift
    /// let published = try store.read { try $0.publishedState(of: ["countries", "sets/8271"]) }
    /// ```
    package func publishedState(of names: [String]? = nil) throws -> PublishedState {
        let heads = try names.map { try $0.compactMap { try head(of: $0) } } ?? collections()
        return PublishedState(sequence: try publicationSequence(), entries: try heads.map(entry(of:)))
    }

    /// ``publishedState(of:)`` making entries only for the names whose head is not `known`'s.
    /// With `statedAt` (the sequence at which `known` was the store's state), a known name
    /// that did not move since is confirmed unread: one indexed read of the names moved (the
    /// `published` column), O(changes). Without it, or when more moved than are named, one
    /// statement reads each name's `collections` row alone. Either way a head's date, its
    /// `versions` row and its digest are read only for a head that moved. (Collections are
    /// never deleted once committed, so a known name that did not move still exists.)
    package func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64? = nil) throws -> PublishedState {
        let isUnchanged: (String) throws -> Bool
        if let statedAt, !known.isEmpty, let moved = try namesMoved(since: statedAt, atMost: names.count) {
            isUnchanged = { known[$0] != nil && !moved.contains($0) }
        } else {
            let position = try db.prepare("SELECT epoch, head, floor FROM collections WHERE name = ?")
            isUnchanged = { name in
                guard let stated = known[name] else { return false }
                try position.bind(1, name)
                defer { position.reset() }
                return try position.step() && stated.version == position.uint64(1) && stated.floor == position.uint64(2) && stated.epoch == position.string(0)
            }
        }
        var entries: [SignedIndex.Entry] = []
        var confirmed = Set<String>()
        confirmed.reserveCapacity(names.count)
        for name in names {
            if try isUnchanged(name) {
                confirmed.insert(name)
            } else if let head = try head(of: name) {
                if known[name] == PublishedHead(head) { confirmed.insert(name) } else { entries.append(try entry(of: head)) }
            }
        }
        return PublishedState(sequence: try publicationSequence(), entries: entries, confirmed: confirmed)
    }

    /// `head`'s entry: its stored digest (recomputed for a store from before digests).
    private func entry(of head: CollectionHead) throws -> SignedIndex.Entry {
        SignedIndex.Entry(head: head, digest: try digest(of: head.name) ?? recomputedDigest(of: head.name))
    }

    /// The names whose head moved after publication `sequence` (the `published` column and
    /// its index), or nil when more than `limit` did: then reading the heads named is cheaper.
    private func namesMoved(since sequence: UInt64, atMost limit: Int) throws -> Set<String>? {
        let statement = try db.prepare("SELECT name FROM collections WHERE published > ? LIMIT ?")
        try statement.bind(1, sequence)
        try statement.bind(2, limit + 1)
        var moved = Set<String>()
        while try statement.step() { moved.insert(statement.string(0)) }
        return moved.count > limit ? nil : moved
    }
}
