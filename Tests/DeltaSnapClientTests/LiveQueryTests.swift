import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapSQLiteStore
import DeltaSnapTestSupport
import Foundation
import Observation
import Testing

/// Live queries (issue 47): an observed query yields its result at once, then once per
/// transaction that changed it — pulled, written locally, rolled back, reloaded whole — and
/// nothing (not even a re-run) for a change that cannot affect it. Real server on 127.0.0.1,
/// real SQLite replicas; the counts are pinned exactly.
@Suite struct LiveQueryTests {
    typealias World = TwoWaySyncTests.World

    /// `notes` with n1…n6 in two cities, and a phone that synced them; the query: Lisbon, by price.
    func withWorld(_ body: (World, DeltaSnapReplica) async throws -> Void) async throws {
        try await TwoWaySyncTests().withWorld { world in
            let seed = (1...6).map { #"{"city":"\#($0 <= 3 ? "Lisbon" : "Porto")","id":"n\#($0)","price":\#($0 * 10)}"# }.joined(separator: "\n")
            _ = try Fixtures.importText(seed, into: world.store, collection: "notes", replace: true)
            let phone = try world.replica("phone")
            await phone.sync(ignoringBackoff: true)
            try await body(world, phone)
        }
    }

    /// Observes `query` on `replica`, once its first value arrived.
    static func observing(_ query: ReplicaQuery, on replica: DeltaSnapReplica) async throws -> Seen<[JSONValue]> {
        let seen = Seen(try await replica.observe(query))
        try await seen.waitFor(1)
        return seen
    }

    static let lisbon = ReplicaQuery().filter("city", .equal, .string("Lisbon")).order(by: "price")

    /// What an observer has seen: every value, in order, taken as the stream hands them over.
    final class Seen<Element: Sendable>: Sendable {
        let values = Locked<[Element]>([])
        let task: Task<Void, any Error>

        init(_ stream: AsyncThrowingStream<Element, any Error>) {
            let values = values
            task = Task { for try await value in stream { values.withLock { $0.append(value) } } }
        }

        var count: Int { values.withLock { $0.count } }
        var last: Element? { values.withLock { $0.last } }

        /// Waits (bounded) until `count` values arrived: delivery is synchronous with the commit,
        /// the consumer's task takes them a moment later.
        func waitFor(_ count: Int) async throws {
            try await eventually(within: .seconds(1), every: .milliseconds(2)) { self.count >= count }
        }
    }

    static func ids(_ results: [JSONValue]?) -> [String] {
        (results ?? []).compactMap { if case .string(let id)? = $0["id"] { id } else { nil } }
    }

    @Test func aQueryIsNotifiedOncePerChangeAndNeverForAChangeThatCannotAffectIt() async throws {
        try await withWorld { world, phone in
            let seen = try await Self.observing(Self.lisbon, on: phone)
            #expect(Self.ids(seen.last) == ["n1", "n2", "n3"])

            // A local write to a Porto record that stays in Porto: nothing re-runs.
            try await phone.patch(id: "n5", json: #"{"price":55}"#)
            #expect(await phone.observationCounts == .init(reruns: 0, notifications: 0))
            // A local write inside the result: one re-run, one value.
            try await phone.patch(id: "n2", json: #"{"price":5}"#)
            #expect(await phone.observationCounts == .init(reruns: 1, notifications: 1))
            try await seen.waitFor(2)
            #expect(Self.ids(seen.last) == ["n2", "n1", "n3"])
            // A record moving into the filter: one more.
            try await phone.patch(id: "n4", json: #"{"city":"Lisbon"}"#)
            #expect(await phone.observationCounts == .init(reruns: 2, notifications: 2))

            // The push and the pull that settles it: the values are the same, so no value.
            await phone.sync(ignoringBackoff: true)
            #expect(await phone.observationCounts.notifications == 2)
            #expect(try await phone.pendingWrites().isEmpty)

            // Another device's change pulled: one value; an unrelated one pulled: no re-run.
            let tablet = try world.replica("tablet")
            await tablet.sync(ignoringBackoff: true)
            try await tablet.patch(id: "n1", json: #"{"price":1}"#)
            try await tablet.patch(id: "n6", json: #"{"price":66}"#)
            await tablet.sync(ignoringBackoff: true)
            let before = await phone.observationCounts
            try await Self.pull(phone, world)
            #expect(await phone.observationCounts.notifications == before.notifications + 1)
            #expect(await phone.observationCounts.reruns == before.reruns + 1, "n6 (Porto) made a re-run")
            try await seen.waitFor(3)
            #expect(Self.ids(seen.last) == ["n1", "n2", "n3", "n4"])
            seen.task.cancel()
        }
    }

    @Test func aRefusedWriteIsShownThenRolledBackWithOneValueEach() async throws {
        try await withWorld { world, phone in
            let tablet = try world.replica("tablet")
            await tablet.sync(ignoringBackoff: true)
            let seen = try await Self.observing(Self.lisbon, on: phone)
            // Both create "n9" in Lisbon; the tablet's lands first, the phone's is refused.
            try await tablet.insert(id: "n9", json: #"{"city":"Lisbon","price":90}"#)
            await tablet.sync(ignoringBackoff: true)
            try await phone.insert(id: "n9", json: #"{"city":"Lisbon","price":1}"#)
            #expect(await phone.observationCounts.notifications == 1)
            try await seen.waitFor(2)
            #expect(Self.ids(seen.last) == ["n9", "n1", "n2", "n3"])
            await phone.sync(ignoringBackoff: true)
            #expect(await phone.lastPushReport.refused.map(\.id) == ["n9"])
            // Rolled back to the server's n9 (price 90): the result changed once more.
            try await Self.pull(phone, world)
            try await seen.waitFor(3)
            #expect(Self.ids(seen.last) == ["n1", "n2", "n3", "n9"])
            let counts = await phone.observationCounts
            #expect(counts.notifications <= 3, "\(counts)")
            seen.task.cancel()
        }
    }

    @Test func aRecordIsObservedByIdAcrossAFullReload() async throws {
        try await withWorld { world, phone in
            let record = Seen(try await phone.observe(id: "n3"))
            try await record.waitFor(1)
            let query = try await Self.observing(Self.lisbon, on: phone)
            // A write to another record: the record's observer hears nothing.
            try await phone.patch(id: "n1", json: #"{"price":11}"#)
            try await query.waitFor(2)
            #expect(record.count == 1)
            await phone.sync(ignoringBackoff: true)
            // The server's state replaced: n3 deleted (a full body after a reimport), Lisbon shrinks.
            let rest = (1...6).filter { $0 != 3 }.map { #"{"city":"\#($0 <= 3 ? "Lisbon" : "Porto")","id":"n\#($0)","price":\#($0 == 1 ? 11 : $0 * 10)}"# }
            _ = try Fixtures.importText(rest.joined(separator: "\n"), into: world.store, collection: "notes", replace: true)
            try await Self.pull(phone, world)
            try await record.waitFor(2)
            #expect(record.values.withLock { $0.last } == .some(nil))
            #expect(Self.ids(query.last) == ["n1", "n2"])
            record.task.cancel()
            query.task.cancel()
        }
    }

    /// A consumer that stops listening is forgotten: later changes run nothing for it.
    @Test func anObserverThatStopsListeningCostsNothingAfter() async throws {
        try await withWorld { world, phone in
            let seen = try await Self.observing(Self.lisbon, on: phone)
            seen.task.cancel()
            _ = await seen.task.result
            try await Task.sleep(for: .milliseconds(20))
            try await phone.patch(id: "n1", json: #"{"price":12}"#)
            #expect(await phone.observationCounts.reruns == 0)
        }
    }

    /// `LiveQuery`: Observation sees its results change, on the main actor.
    @Test func aLiveQueryChangesItsObservableResults() async throws {
        try await withWorld { _, phone in try await Self.checkLiveQuery(on: phone) }
    }

    @MainActor static func checkLiveQuery(on phone: DeltaSnapReplica) async throws {
        let live = LiveQuery(lisbon, in: phone)
        for _ in 0..<500 where !live.isLoaded { try await Task.sleep(for: .milliseconds(2)) }
        #expect(ids(live.results) == ["n1", "n2", "n3"])
        let changed = Locked(false)
        withObservationTracking { _ = live.results } onChange: { changed.withLock { $0 = true } }
        try await phone.patch(id: "n3", json: #"{"city":"Porto"}"#)
        for _ in 0..<500 where !changed.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(2)) }
        #expect(changed.withLock { $0 })
        #expect(ids(live.results) == ["n1", "n2"])
    }

    /// The shared query vectors (Tests/Fixtures/query-vectors.json, SQLite's answers to every
    /// operator against every JSON type, which the browser client is held to as well): the
    /// replica's query selects and orders exactly those ids, and the filters a live query
    /// evaluates in memory pass exactly those records (a difference would skip a re-run that
    /// was needed).
    @Test func queriesAndInMemoryFiltersFollowTheSharedVectors() async throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/query-vectors.json")
        let vectors = try JSONReader(bytes: Array(try Data(contentsOf: url))).readValue()
        guard case .array(let records)? = vectors["records"], case .array(let cases)? = vectors["cases"] else {
            Issue.record("query-vectors.json has no records or cases")
            return
        }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let replica = try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "things", url: URL(string: "http://127.0.0.1:1/v1/collections/things")!)
        for case .string(let text) in records {
            let record = try JSONReader(bytes: Array(text.utf8)).readValue()
            guard case .string(let id)? = record["id"] else { continue }
            try await replica.put(id: id, json: text)
        }
        let all = try await replica.query(ReplicaQuery())
        #expect(all.count == records.count)
        for vector in cases {
            var query = ReplicaQuery()
            for filter in Self.array(vector["filters"]) {
                guard case .string(let field)? = filter["field"], case .string(let op)? = filter["op"] else { continue }
                if op == "isNull" {
                    query = query.whereNull(field)
                } else {
                    let comparison = try #require(ReplicaQuery.Comparison(rawValue: op))
                    query = query.filter(field, comparison, filter["value"] ?? .null)
                }
            }
            for order in Self.array(vector["orders"]) {
                guard case .string(let field)? = order["field"] else { continue }
                let descending: Bool = order["descending"] == JSONValue.bool(true)
                query = query.order(by: field, descending: descending)
            }
            if case .number(let limit)? = vector["limit"] { query = query.limit(Int(limit) ?? 0) }
            let expected = Self.strings(vector["ids"])
            #expect(expected == Self.ids(try await replica.query(query)), "\(vector)")
            if query.orders.isEmpty && query.maximumCount == nil {
                #expect(expected == Self.ids(all.filter(query.matches)), "in memory: \(vector)")
            }
        }
        #expect(cases.count > 300)
    }

    static func array(_ value: JSONValue?) -> [JSONValue] {
        guard case .array(let items)? = value else { return [] }
        return items
    }

    static func strings(_ value: JSONValue?) -> [String] {
        array(value).compactMap { if case .string(let text) = $0 { text } else { nil } }
    }

    /// Pulls until the replica holds the store's head.
    static func pull(_ replica: DeltaSnapReplica, _ world: World) async throws {
        for _ in 0..<50 {
            await replica.pull(ignoringBackoff: true)
            if await replica.token == (try world.store.head(of: "notes"))?.token.description { return }
            try await Task.sleep(for: .milliseconds(30))
        }
        Issue.record("the replica did not reach the store's head")
    }
}
