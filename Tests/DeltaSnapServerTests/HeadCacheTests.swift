import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapSynthetic
import Testing
@testable import DeltaSnapServer

/// A changed view is decided from the heads changed since it last held (``ChangeLog``), not
/// by comparing every head it depends on: both must always give the same verdict.
@Suite struct HeadCacheTests {
    static func head(_ name: String, version: UInt64, floor: UInt64 = 0) -> CollectionHead {
        CollectionHead(name: name, epoch: "e", version: version, checksum: .empty, count: 1, committedAt: 1_000, floor: floor)
    }

    @Test func theLogKeepsTheLatestNamesAndSaysWhenItNoLongerCovers() {
        var log = ChangeLog(capacity: 3)
        #expect(log.names(after: 0) == [])
        log.record(["a"], as: 1)
        log.record(["b", "c"], as: 2)
        #expect(log.names(after: 0) == ["c", "b", "a"])
        #expect(log.names(after: 1) == ["c", "b"])
        #expect(log.names(after: 2) == [])
        log.record(["a"], as: 3)
        // "a" of change 1 is gone: a view from before it cannot be told from the log.
        #expect(log.names(after: 0) == nil)
        #expect(log.names(after: 1) == ["a", "c", "b"])
        log.record(["d", "e"], as: 4)
        // Change 2's names are gone: only views from change 2 on are covered.
        #expect(log.names(after: 1) == nil)
        #expect(log.names(after: 2) == ["e", "d", "a"])
        #expect(log.names(after: 3) == ["e", "d"])
        for change in UInt64(5)...100 { log.record(["n\(change)"], as: change) }
        #expect(log.names(after: 97) == ["n100", "n99", "n98"])
    }

    /// A partition evicted from the bounded cache, read again on demand at a newer version
    /// before the commit that made it is reported: the report is the change a view that
    /// held the older version sees (once, and no other).
    @Test func aCommitReadOnDemandBeforeItsReportMovesTheViewsThatHeldItsPredecessor() {
        let cache = HeadCache([Self.head("countries", version: 1)], partitionCapacity: 1, changeLogCapacity: 64)
        cache.update(Self.head("sets/p", version: 1))
        var dependencies = ViewDependencies(heads: [], collectionCount: 1, heldAt: cache.changes)
        for name in ["countries", "sets/p"] {
            let held = cache[name]?.head
            dependencies.heads.append((name, held?.token, held?.floor ?? 0))
        }
        cache.update(Self.head("sets/q", version: 1))  // evicts sets/p (capacity 1)
        #expect(cache["sets/p"] == nil)
        cache.installReadOnDemand(Self.head("sets/p", version: 2))
        let changes = cache.changes
        cache.replace(with: [Self.head("sets/p", version: 2)])  // the commit's report, later
        #expect(cache.changes == changes + 1)
        #expect(Self.verdict(cache.standing(of: dependencies)) == "moved [1]")
        #expect(Self.verdict(cache.standing(of: dependencies)) == Self.fullVerdict(cache, dependencies))
        // Reported again (another instance's notice, a replica's): no further change.
        cache.replace(with: [Self.head("sets/p", version: 2)])
        #expect(cache.changes == changes + 1)
        // Read on demand again at the version held: nothing moves.
        cache.installReadOnDemand(Self.head("sets/p", version: 2))
        #expect(cache.changes == changes + 1)
    }

    /// What a full comparison of every dependency says (the definition).
    static func fullVerdict(_ cache: HeadCache, _ dependencies: ViewDependencies) -> String {
        var moved: [Int] = []
        for (position, (name, token, floor)) in dependencies.heads.enumerated() {
            let held = cache[name]?.head
            if held?.token == token, (held?.floor ?? 0) == floor { continue }
            guard token != nil, held != nil else { return "changed" }
            moved.append(position)
        }
        return moved.isEmpty ? "holds" : "moved \(moved)"
    }

    static func verdict(_ standing: ViewStanding) -> String {
        switch standing {
        case .holds: "holds"
        case .moved(let moved, _): "moved \(moved.keys.sorted())"
        case .changed: "changed"
        }
    }

    /// Random commits (some to heads a view depends on, some creating a partition it waits
    /// for), with logs small enough to overflow: the log's verdict is the full comparison's.
    @Test(arguments: [4, 64, 16_384]) func theLogsVerdictIsTheFullComparisons(_ logCapacity: Int) {
        var random = SplitMix64(seed: UInt64(logCapacity))
        let collections = ["countries", "members"].map { Self.head($0, version: 1) }
        let partitions = (0..<200).map { Self.head("sets/s\(String(format: "%03d", $0))", version: 1) }
        let cache = HeadCache(collections + partitions, changeLogCapacity: logCapacity)
        var versions = [String: UInt64]()
        for round in 0..<300 {
            // A view of the collections, 20 partitions and 2 not created yet, built now.
            var names = Set<String>()
            while names.count < 20 { names.insert("sets/s\(String(format: "%03d", Int(random.next() % 200)))") }
            names.insert("sets/new\(round)")
            names.insert("sets/new\(round + 1)")
            var dependencies = ViewDependencies(heads: [], collectionCount: collections.count, heldAt: cache.changes)
            for name in ["countries", "members"] + names.sorted(by: { $0.utf8Precedes($1) }) {
                let held = cache[name]?.head
                dependencies.heads.append((name, held?.token, held?.floor ?? 0))
            }
            for position in dependencies.heads.indices {
                #expect(dependencies.position(of: dependencies.heads[position].name) == position)
            }
            // Then up to 6 commits, anywhere; sometimes one creates a partition it waits for.
            for _ in 0..<(random.next() % 7) {
                let name = random.next() % 9 == 0
                    ? "sets/new\(round + 1)"
                    : (random.next() % 10 == 0 ? "countries" : "sets/s\(String(format: "%03d", Int(random.next() % 200)))")
                versions[name, default: 1] += 1
                if random.next() % 2 == 0 {
                    cache.update(Self.head(name, version: versions[name]!))
                } else {
                    cache.replace(with: [Self.head(name, version: versions[name]!), Self.head("sets/s199", version: versions["sets/s199", default: 1])])
                }
            }
            let expected = Self.fullVerdict(cache, dependencies)
            #expect(Self.verdict(cache.standing(of: dependencies)) == expected, "round \(round)")
        }
    }
}
