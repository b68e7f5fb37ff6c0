import DeltaSnapCore
import DeltaSnapStore

/// The heads a view was built from — every one it looked at, listed or not (a partition not
/// created yet is recorded as absent): the collections, then the partitions, each in name
/// order — how many collections there were, and what it listed.
struct ViewDependencies: Sendable {
    var heads: [(name: String, token: ServerToken?, floor: UInt64)]
    var collectionCount: Int
    /// ``HeadCache/changes`` when these were last known to hold: while it has not moved, no
    /// head changed at all and the check is one comparison, however many heads a view lists.
    var heldAt: UInt64
    /// Where the heads the view lists are in ``heads``, in name order (UTF-8).
    var listed: [Int] = []

    /// Where the head of `name` is in ``heads``: they are the collections, then the
    /// partitions, each run in name order (UTF-8).
    func position(of name: String) -> Int? {
        var (low, high) = CollectionPath.isPartition(name) ? (collectionCount, heads.count) : (0, min(collectionCount, heads.count))
        while low < high {
            let middle = (low + high) / 2
            let candidate = heads[middle].name
            if candidate == name { return middle }
            if candidate.utf8Precedes(name) { low = middle + 1 } else { high = middle }
        }
        return nil
    }

    /// The heads the view lists, as the document names them.
    var listedKeys: [EntryKey] {
        listed.map { position in
            let (name, token, floor) = heads[position]
            // A listed head exists: only a head that does not is recorded without a token.
            return EntryKey(name: name, token: token!, floor: floor)
        }
    }
}

/// What became of the heads a view was built from (``HeadCache/standing(of:)``).
enum ViewStanding: Sendable {
    /// Every one is as recorded, at ``HeadCache/changes`` `at`.
    case holds(at: UInt64)
    /// These moved (by position in ``ViewDependencies/heads``) to a new token or floor; the
    /// others are as recorded, at `at`.
    case moved([Int: CollectionHead], at: UInt64)
    /// A collection was added, or a head appeared or is no longer cached: the view must be
    /// decided again.
    case changed
}
