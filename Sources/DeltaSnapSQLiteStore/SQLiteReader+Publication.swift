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
    /// one statement for every name, a head's digest read and hashed only when it moved.
    package func publishedState(of names: [String], confirming known: [String: PublishedHead]) throws -> PublishedState {
        let statement = try db.prepare(Self.headSQL + " WHERE c.name = ?")
        var entries: [SignedIndex.Entry] = []
        var confirmed = Set<String>()
        for name in names {
            try statement.bind(1, name)
            defer { statement.reset() }
            guard try statement.step() else { continue }
            let head = Self.head(from: statement)
            if known[name] == PublishedHead(head) {
                confirmed.insert(name)
            } else {
                entries.append(SignedIndex.Entry(head: head, digest: try digest(of: name) ?? recomputedDigest(of: name)))
            }
        }
        return PublishedState(sequence: try publicationSequence(), entries: entries, confirmed: confirmed)
    }
}
