import DeltaSnapSQLiteStore
@testable import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Testing

/// The one eviction policy of the server's caches: CLOCK, bounded by count and by cost.
@Suite struct BoundedCacheTests {
    @Test func anEntryReadSinceTheHandPassedSurvivesAndAOneOffDoesNot() {
        var cache = BoundedCache<String, Int>(capacity: 3)
        for (value, key) in ["a", "b", "c"].enumerated() { cache.set(value, forKey: key) }
        _ = cache.value(forKey: "a")
        _ = cache.value(forKey: "c")
        cache.set(3, forKey: "d")
        #expect(cache.peek("b") == nil && cache.peek("a") == 0 && cache.peek("c") == 2 && cache.peek("d") == 3)
        // A burst of one-off keys replaces itself, not the entries in use.
        for key in 0..<50 {
            _ = cache.value(forKey: "a")
            cache.set(key, forKey: "burst\(key)")
        }
        #expect(cache.count == 3 && cache.peek("a") == 0)
    }

    @Test func theCountAndTheCostStayWithinTheirBoundsAndPinnedEntriesStay() {
        var cache = BoundedCache<String, [UInt8]>(capacity: 100, costLimit: 1_000, isPinned: { $0.isEmpty })
        cache.set([], forKey: "", cost: 300)
        var generator = SystemRandomNumberGenerator()
        for step in 0..<2_000 {
            let key = "k\(Int.random(in: 0..<400, using: &generator))"
            if step % 3 == 0 { _ = cache.value(forKey: key) }
            cache.set([], forKey: key, cost: Int.random(in: 0...200, using: &generator))
            #expect(cache.count <= 100 && cache.totalCost <= 1_000)
        }
        #expect(cache.peek("") != nil)
        cache.set([], forKey: "too big", cost: 1_001)
        #expect(cache.peek("too big") == nil)
    }

    @Test func aGrownEntryMakesRoomWithoutForgettingItself() {
        var cache = BoundedCache<Int, Int>(capacity: 10, costLimit: 10)
        for key in 0..<5 { cache.set(key, forKey: key, cost: 2) }
        cache.set(99, forKey: 2, cost: 8)
        #expect(cache.peek(2) == 99 && cache.totalCost <= 10 && cache.count == 2)
        #expect(cache.removeValue(forKey: 2) == 99 && cache.totalCost <= 2)
        cache.modify(3) { $0 += 1 }
        cache.removeAll()
        #expect(cache.count == 0 && cache.totalCost == 0)
    }
}

extension BoundedCacheTests {
    /// Full bodies are kept within their byte budget: polls of many partitions' full bodies
    /// do not keep every body, and each is still answered whole and right.
    @Test func fullBodiesStayWithinTheirBudget() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteCollectionStore(path: dir.file("s.sqlite"))
        for key in 0..<6 { _ = try await store.importBatch(Array(Fixtures.ndjson(0..<200, seed: UInt64(key + 1)).utf8), into: "items/p\(key)") }
        let cache = FullBodyCache(capacity: 100, byteBudget: 3 * 12_000)
        var sizes: [String: Int] = [:]
        for round in 0..<2 {
            for key in 0..<6 {
                let head = try #require(try await store.head(of: "items/p\(key)"))
                let entry = try await cache.body(for: head, store: store)
                #expect(entry.head.token == head.token)
                if round == 0 { sizes["p\(key)"] = entry.gzip.readableBytes } else { #expect(sizes["p\(key)"] == entry.gzip.readableBytes) }
            }
        }
        #expect(cache.keptBytes <= 3 * 12_000 && cache.keptBytes > 0, "\(cache.keptBytes) bytes kept, bodies \(sizes)")
        await store.close()
    }
}
