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
}
