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
        var entries: [SignedIndex.Entry] = []
        let heads = try names.map { try $0.compactMap { try head(of: $0) } } ?? collections()
        for head in heads {
            entries.append(SignedIndex.Entry(head: head, digest: try digest(of: head.name) ?? recomputedDigest(of: head.name)))
        }
        return PublishedState(sequence: try publicationSequence(), entries: entries)
    }

    /// ``publishedState(of:)`` making entries only for the names whose head is not `known`'s:
    /// one statement for every name that reads the `collections` row alone (a view of a
    /// thousand partitions confirms a thousand rows; the head's date, its `versions` row, and
    /// its digest are read only for a head that moved).
    package func publishedState(of names: [String], confirming known: [String: PublishedHead], statedAt: UInt64? = nil) throws -> PublishedState {
        if let statedAt, !known.isEmpty, let moved = try namesMoved(since: statedAt, atMost: names.count) {
            return try publishedState(of: names, confirming: known, movedSince: moved)
        }
        let position = try db.prepare("SELECT epoch, head, floor FROM collections WHERE name = ?")
        var entries: [SignedIndex.Entry] = []
        var confirmed = Set<String>()
        confirmed.reserveCapacity(names.count)
        for name in names {
            try position.bind(1, name)
            defer { position.reset() }
            guard try position.step() else { continue }
            if let stated = known[name], stated.version == position.uint64(1), stated.floor == position.uint64(2), stated.epoch == position.string(0) {
                confirmed.insert(name)
            } else if let head = try head(of: name) {
                entries.append(SignedIndex.Entry(head: head, digest: try digest(of: name) ?? recomputedDigest(of: name)))
            }
        }
        return PublishedState(sequence: try publicationSequence(), entries: entries, confirmed: confirmed)
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

    /// A known name that did not move is confirmed unread; the rest read whole. (Collections
    /// are never deleted once committed, so a known name that did not move still exists.)
    private func publishedState(of names: [String], confirming known: [String: PublishedHead], movedSince moved: Set<String>) throws -> PublishedState {
        var entries: [SignedIndex.Entry] = []
        var confirmed = Set<String>()
        confirmed.reserveCapacity(names.count)
        for name in names {
            if known[name] != nil, !moved.contains(name) {
                confirmed.insert(name)
            } else if let head = try head(of: name) {
                if known[name] == PublishedHead(head) {
                    confirmed.insert(name)
                } else {
                    entries.append(SignedIndex.Entry(head: head, digest: try digest(of: name) ?? recomputedDigest(of: name)))
                }
            }
        }
        return PublishedState(sequence: try publicationSequence(), entries: entries, confirmed: confirmed)
    }
}
