/// The names of the heads that changed lately, by change number (``HeadCache/changes``): a
/// view built at change N that depends on a thousand heads asks which names changed since,
/// instead of comparing all of them. Bounded: past `capacity` names the oldest are dropped,
/// and a view older than what is kept is checked in full.
///
/// ```swift
/// var log = ChangeLog(capacity: 2)
/// log.record(["sets/1"], as: 1)
/// log.record(["sets/2", "sets/3"], as: 2)
/// log.names(after: 1)   // ["sets/3", "sets/2"]
/// log.names(after: 0)   // nil: a name of change 1 was dropped
/// ```
struct ChangeLog {
    /// Oldest first; the live ones start at `start` (dropped ones are removed in bulk).
    private var entries: [(change: UInt64, name: String)] = []
    private var start = 0
    /// Changes up to this number may have lost names.
    private var incompleteThrough: UInt64 = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// Records that `names` changed, as change number `change` (larger than any before).
    mutating func record(_ names: [String], as change: UInt64) {
        for name in names { entries.append((change, name)) }
        while entries.count - start > capacity {
            incompleteThrough = entries[start].change
            start += 1
        }
        // Amortised: the dropped prefix goes once it is as long as what is kept.
        if start >= capacity {
            entries.removeFirst(start)
            start = 0
        }
    }

    /// The names changed after change number `change`, newest first (a name may repeat), or
    /// nil when some of them are no longer kept.
    func names(after change: UInt64) -> [String]? {
        guard change >= incompleteThrough else { return nil }
        var names: [String] = []
        var index = entries.count - 1
        while index >= start, entries[index].change > change {
            names.append(entries[index].name)
            index -= 1
        }
        return names
    }
}
