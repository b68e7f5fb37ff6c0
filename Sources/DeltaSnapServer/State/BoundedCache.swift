/// A dictionary bounded by a number of entries and a total cost, which forgets by CLOCK
/// (second chance) when either bound would be passed: the one eviction policy of the
/// server's caches (partition heads, verified tokens, memberships, kept index documents).
///
/// Each entry has a "referenced" bit, set by every read through ``value(forKey:)``. To make
/// room, a hand sweeps the slots in a circle: a referenced entry loses its bit and is passed
/// over once, an unreferenced one is forgotten. So an entry read since the hand last passed
/// survives, and a read costs one bit — cheaper than LRU's list moves on the 304 path — while
/// a working set that fits is never evicted by a burst of one-off entries. Entries whose key
/// `isPinned` accepts are never forgotten (the public index).
///
/// A value type, as GRDB and swift-nio keep their state machines: the owner holds it under
/// its own lock (`NIOLockedValueBox`).
///
/// ```swift
/// var cache = BoundedCache<String, Int>(capacity: 2)
/// cache.set(1, forKey: "a")
/// cache.set(2, forKey: "b")
/// _ = cache.value(forKey: "a")   // "a" is referenced
/// cache.set(3, forKey: "c")      // forgets "b", the one not read since
/// ```
struct BoundedCache<Key: Hashable, Value> {
    fileprivate struct Slot {
        var key: Key
        var value: Value
        var cost: Int
        var referenced: Bool
    }

    private var slots: [Slot?] = []
    private var index: [Key: Int] = [:]
    private var freeSlots: [Int] = []
    private var hand = 0
    /// Entries kept at most.
    let capacity: Int
    /// The sum of the entries' costs kept at most.
    let costLimit: Int
    /// The sum of the costs of the entries kept.
    private(set) var totalCost = 0
    private let isPinned: (@Sendable (Key) -> Bool)?

    init(capacity: Int, costLimit: Int = .max, isPinned: (@Sendable (Key) -> Bool)? = nil) {
        self.capacity = max(1, capacity)
        self.costLimit = costLimit
        self.isPinned = isPinned
    }

    /// Entries kept.
    var count: Int { index.count }

    /// The value for `key`, marked as used; nil when none is kept.
    mutating func value(forKey key: Key) -> Value? {
        guard let position = index[key] else { return nil }
        slots[position]!.referenced = true
        return slots[position]!.value
    }

    /// The value for `key`, without marking it used.
    func peek(_ key: Key) -> Value? {
        index[key].map { slots[$0]!.value }
    }

    /// Keeps `value` under `key` (replacing any), forgetting others while either bound would
    /// be passed. A value whose cost alone passes ``costLimit`` is not kept.
    mutating func set(_ value: Value, forKey key: Key, cost: Int = 0) {
        if let position = index[key] {
            totalCost += cost - slots[position]!.cost
            slots[position]!.value = value
            slots[position]!.cost = cost
            slots[position]!.referenced = true
            makeRoom(keeping: position)
            return
        }
        guard cost <= costLimit else { return }
        // A new entry starts unreferenced: a burst of one-off keys replaces itself.
        let slot = Slot(key: key, value: value, cost: cost, referenced: false)
        while index.count >= capacity || totalCost + cost > costLimit {
            guard evictOne(sparing: nil) else { break }
        }
        let position: Int
        if let free = freeSlots.popLast() {
            slots[free] = slot
            position = free
        } else {
            slots.append(slot)
            position = slots.count - 1
        }
        index[key] = position
        totalCost += cost
    }

    /// Changes the value kept under `key` in place, if any (not marking it used).
    mutating func modify(_ key: Key, _ change: (inout Value) -> Void) {
        guard let position = index[key] else { return }
        change(&slots[position]!.value)
    }

    /// Forgets `key`; returns what was kept.
    @discardableResult
    mutating func removeValue(forKey key: Key) -> Value? {
        guard let position = index.removeValue(forKey: key), let slot = slots[position] else { return nil }
        slots[position] = nil
        freeSlots.append(position)
        totalCost -= slot.cost
        return slot.value
    }

    /// Forgets up to `count` entries by the same CLOCK as eviction (what room is made by,
    /// when the owner needs some back: kept descriptors giving way to connections).
    mutating func evict(_ count: Int) {
        for _ in 0..<max(0, count) {
            guard evictOne(sparing: nil) else { return }
        }
    }

    /// Forgets everything.
    mutating func removeAll() {
        slots.removeAll()
        index.removeAll()
        freeSlots.removeAll()
        hand = 0
        totalCost = 0
    }

    /// After an entry grew: forgets others (never `position`) until the cost fits.
    private mutating func makeRoom(keeping position: Int) {
        while totalCost > costLimit {
            guard evictOne(sparing: position) else { return }
        }
    }

    /// Forgets one entry by CLOCK; false when nothing can be forgotten.
    private mutating func evictOne(sparing spared: Int?) -> Bool {
        guard !slots.isEmpty else { return false }
        // Two turns at most: the first clears every referenced bit it passes.
        for _ in 0..<(2 * slots.count) {
            let position = hand
            hand = (hand + 1) % slots.count
            guard let slot = slots[position], position != spared, isPinned?(slot.key) != true else { continue }
            if slot.referenced {
                slots[position]!.referenced = false
                continue
            }
            removeValue(forKey: slot.key)
            return true
        }
        return false
    }
}

extension BoundedCache: Sendable where Key: Sendable, Value: Sendable {}
extension BoundedCache.Slot: Sendable where Key: Sendable, Value: Sendable {}
