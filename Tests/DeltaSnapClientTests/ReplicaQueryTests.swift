import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Queries on the replica: results equal a filter over `dump`, indexes are used, and
/// pending local writes are part of what a query sees.
@Suite struct ReplicaQueryTests {
    func replica(_ dir: TemporaryDirectory, count: Int = 500) async throws -> DeltaSnapReplica {
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<count), into: store, collection: "items")
        try await Fixtures.bake(store.path, "items", into: dir.path)
        return try DeltaSnapReplica(
            path: dir.file("r.sqlite"), collection: "items", url: URL(string: "http://127.0.0.1:9/v1/collections/items")!,
            bundledSnapshot: dir.file("items.snapshot"), timeout: .seconds(1))
    }

    /// Every visible record, parsed, as `dump` prints them (sorted by id).
    func everything(_ replica: DeltaSnapReplica) async throws -> [JSONValue] {
        var all: [JSONValue] = []
        try await replica.forEachRecord { all.append(try JSONReader(bytes: Array($0)).readValue()) }
        return all
    }

    func number(_ value: JSONValue?) -> Double? {
        if case .number(let text)? = value { return Double(text) }
        return nil
    }

    func id(_ value: JSONValue) -> String {
        if case .string(let text)? = value["id"] { return text }
        return ""
    }

    @Test func resultsEqualAFilterOverEveryRecord() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try await replica(dir)
        let all = try await everything(replica)
        let city = try #require(all.first?["city"])

        for indexed in [false, true] {
            if indexed {
                try await replica.createIndex(on: "city")
                try await replica.createIndex(on: "price")
                try await replica.createIndex(on: "owner.name")
            }
            let inCity = try await replica.query(ReplicaQuery().filter("city", .equal, city))
            #expect(inCity.map(id) == all.filter { $0["city"] == city }.map(id))

            let cheap = try await replica.query(ReplicaQuery().filter("price", .lessThan, .number("20")).order(by: "price", descending: true).limit(25))
            let expected = all.filter { (number($0["price"]) ?? .infinity) < 20 }
                .sorted { (number($0["price"])!, id($1)) > (number($1["price"])!, id($0)) }
                .prefix(25)
            #expect(cheap.map(id) == expected.map(id))

            let active = try await replica.query(ReplicaQuery().filter("active", .equal, .bool(true)).filter("city", .notEqual, city))
            #expect(active.map(id) == all.filter { $0["active"] == .bool(true) && $0["city"] != city }.map(id))

            let nested = try #require(all[7]["owner"]?["name"])
            let owners = try await replica.query(ReplicaQuery().filter("owner.name", .equal, nested))
            #expect(owners.map(id) == all.filter { $0["owner"]?["name"] == nested }.map(id))
            #expect(try await replica.query(ReplicaQuery().whereNull("nope")).count == all.count)
        }
        #expect(try await replica.query(ReplicaQuery().filter("id", .greaterThanOrEqual, .string("r0000490"))).map(id) == (490..<500).map { String(format: "r%07d", $0) })
    }

    @Test func indexedQueriesUseTheIndex() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try await replica(dir, count: 50)
        try await replica.createIndex(on: "city")
        let db = try SQLiteConnection(path: dir.file("r.sqlite"), readOnly: true)
        let plan = try db.prepare("EXPLAIN QUERY PLAN SELECT body FROM records WHERE collection = '' AND json_extract(CAST(body AS TEXT), '$.city') = 'x' ORDER BY id")
        var details: [String] = []
        while try plan.step() { details.append(plan.string(3)) }
        #expect(details.contains { $0.contains("records_by_city") }, "\(details)")
    }

    @Test func pendingLocalWritesArePartOfTheResults() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try await replica(dir, count: 50)
        try await replica.createIndex(on: "city")
        try await replica.patch(id: "r0000003", json: #"{"city":"Atlantis"}"#)
        try await replica.put(id: "new-1", json: #"{"city":"Atlantis","price":1}"#)
        let someone = try #require(try await replica.query(ReplicaQuery().filter("city", .notEqual, .string("Atlantis")).limit(1)).first)
        try await replica.delete(id: id(someone))

        let atlantis = try await replica.query(ReplicaQuery().filter("city", .equal, .string("Atlantis")).order(by: "price"))
        #expect(Set(atlantis.map(id)) == ["r0000003", "new-1"])
        #expect(atlantis.first.map(id) == "new-1")  // price 1 sorts first
        let all = try await everything(replica)
        #expect(try await replica.query(ReplicaQuery().filter("city", .notEqual, .string("Atlantis"))).map(id)
            == all.filter { $0["city"] != .string("Atlantis") }.map(id))
        #expect(!all.map(id).contains(id(someone)))
    }

    /// A limited, ordered query while local writes are pending: its server records are read
    /// cut to the limit (by the index when there is one) and merged with the overlay, so the
    /// result must still equal the filter sorted over every record, local writes included —
    /// writes that move a record to the front, out of the filter, or delete one of the first.
    @Test func aLimitedQueryWithPendingWritesEqualsTheSortedFilter() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try await replica(dir, count: 300)
        // The 40 cheapest of the bundle pass the filter.
        let threshold = try #require(try await everything(replica).compactMap { number($0["price"]) }.sorted().dropFirst(40).first)
        let cheapFirst = { (all: [JSONValue], descending: Bool, limit: Int) -> [String] in
            all.filter { (number($0["price"]) ?? .infinity) < threshold }
                .sorted { a, b in
                    let (pa, pb) = (number(a["price"])!, number(b["price"])!)
                    return pa != pb ? (descending ? pa > pb : pa < pb) : id(a) < id(b)
                }
                .prefix(limit).map(id)
        }
        for indexed in [false, true] {
            if indexed { try await replica.createIndex(on: "price") }
            let before = try await everything(replica)
            let first = cheapFirst(before, false, 5)
            try #require(first.count == 5)
            // The cheapest server record deleted, another made the cheapest, one moved out of
            // the filter, and a new record that ties the cheapest on price.
            try await replica.delete(id: first[0])
            try await replica.patch(id: first[3], json: #"{"price":-1}"#)
            try await replica.patch(id: first[1], json: #"{"price":1e9}"#)
            try await replica.put(id: "new-\(indexed)", json: #"{"price":-1,"city":"Atlantis"}"#)
            let all = try await everything(replica)
            for limit in [1, 3, 5, 25] {
                for descending in [false, true] {
                    let query = ReplicaQuery().filter("price", .lessThan, .number("\(threshold)")).order(by: "price", descending: descending).limit(limit)
                    #expect(try await replica.query(query).map(id) == cheapFirst(all, descending, limit), "indexed \(indexed), limit \(limit), descending \(descending)")
                }
            }
        }
    }

    @Test func badFieldsAndValuesAreRefused() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try await replica(dir, count: 5)
        for field in ["", "a..b", "1st", "name'); DROP TABLE records; --", "a b", "$.x"] {
            await #expect(throws: ReplicaQuery.InvalidField.self) { _ = try await replica.query(ReplicaQuery().filter(field, .equal, .string("x"))) }
            await #expect(throws: ReplicaQuery.InvalidField.self) { try await replica.createIndex(on: field) }
        }
        await #expect(throws: ReplicaQuery.InvalidValue.self) { _ = try await replica.query(ReplicaQuery().filter("city", .equal, .array([]))) }
        #expect(await replica.count == 5)
    }
}
