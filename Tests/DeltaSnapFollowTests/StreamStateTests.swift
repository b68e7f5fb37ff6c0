import DeltaSnapCore
import Testing

@testable import DeltaSnapFollow

/// The follower's stream as a value: each `pgoutput` message in, one action out — no
/// PostgreSQL, no follower. What the live tests (FollowTests) show end to end, decided here.
@Suite struct StreamStateTests {
    static let table = FollowedTable(schema: "public", table: "items", collection: "items")
    static let columns = [
        PgRelation.Column(name: "id", typeOID: PgType.int8, isKey: true), PgRelation.Column(name: "name", typeOID: 25, isKey: false),
    ]
    static let relation = PgRelation(id: 7, namespace: "public", name: "items", replicaIdentity: UInt8(ascii: "d"), columns: columns)

    func state(applied: UInt64 = 0, spillRows: Int = 1_000) throws -> StreamState {
        let shape = try TableShape(table: Self.table, columns: Self.columns, key: ["id"])
        return StreamState(position: FollowPosition(applied: applied, copy: nil), shapes: [Self.table.qualifiedName: shape], spillRows: spillRows)
    }

    func committed(_ action: StreamAction) -> CommittedTransaction? {
        if case .publish(let commit) = action { commit } else { nil }
    }

    func notes(_ action: StreamAction) -> [StreamNote] {
        if case .report(let notes) = action { notes } else { [] }
    }

    func records(_ commit: CommittedTransaction?) -> [String: String] {
        (commit?.changes["items"] ?? [:]).mapValues { String(decoding: $0.bytes, as: UTF8.self) }
    }

    @Test func aTransactionsChangesArePublishedAtItsCommitAndNotBefore() throws {
        var state = try state()
        #expect(committed(try state.take(.relation(Self.relation))) == nil)
        #expect(committed(try state.take(.begin(finalLSN: 100, commitTime: 0, xid: 1))) == nil)
        #expect(notes(try state.take(.insert(relation: 7, new: [.text("1"), .text("one")]))) == [])
        #expect(notes(try state.take(.insert(relation: 7, new: [.text("2"), .text("two")]))) == [])
        #expect(notes(try state.take(.delete(relation: 7, old: [.text("2"), .null]))) == [])
        let commit = committed(try state.take(.commit(commitLSN: 100, endLSN: 120, commitTime: 5)))
        #expect(commit?.endLSN == 120 && commit?.commitTime == 5)
        #expect(records(commit) == ["1": #"{"id":"1","name":"one"}"#, "2": #"{"hidden":true,"id":"2"}"#])
        #expect(commit?.readsStore == false)
        // The transaction is closed: a change outside one is dropped.
        #expect(state.open == nil)
    }

    @Test func aTransactionAlreadyAppliedIsReadAndDropped() throws {
        var state = try state(applied: 500)
        _ = try state.take(.relation(Self.relation))
        _ = try state.take(.begin(finalLSN: 400, commitTime: 0, xid: 3))
        _ = try state.take(.insert(relation: 7, new: [.text("1"), .text("one")]))
        #expect(committed(try state.take(.commit(commitLSN: 400, endLSN: 450, commitTime: 0))) == nil)
    }

    @Test func aRelationOfAFollowedTableAsksTheFollowerToResolveIt() throws {
        var state = try state()
        guard case .resolve(let relation, let current) = try state.take(.relation(Self.relation)) else {
            Issue.record("a followed table's Relation message is resolved by the follower")
            return
        }
        #expect(relation == Self.relation && current.columns == Self.columns)
        // A table nobody follows: nothing to resolve.
        var other = Self.relation
        other.id = 8
        other.name = "elsewhere"
        guard case .none = try state.take(.relation(other)) else {
            Issue.record("an unfollowed table needs nothing")
            return
        }
        // The follower's answer: a new column, which the next transaction carries.
        let wider = Self.columns + [PgRelation.Column(name: "price", typeOID: PgType.int8, isKey: false)]
        let shape = try TableShape(table: Self.table, columns: wider, key: ["id"])
        state.adopted(Self.relation, shape: shape, reshape: Reshape(collection: "items", added: [JSONMember("price", .null)], dropped: []))
        _ = try state.take(.begin(finalLSN: 100, commitTime: 0, xid: 1))
        _ = try state.take(.insert(relation: 7, new: [.text("1"), .text("one"), .text("3")]))
        let commit = committed(try state.take(.commit(commitLSN: 100, endLSN: 120, commitTime: 0)))
        #expect(records(commit) == ["1": #"{"id":"1","name":"one","price":3}"#])
        #expect(commit?.reshapes["items"]?.added.map(\.key) == ["price"] && commit?.readsStore == true)
        // A reshape goes with one transaction only.
        _ = try state.take(.begin(finalLSN: 200, commitTime: 0, xid: 2))
        #expect(committed(try state.take(.commit(commitLSN: 200, endLSN: 220, commitTime: 0)))?.reshapes.isEmpty == true)
    }

    @Test func rowsThatCannotBePublishedAreReportedNotThrown() throws {
        var state = try state()
        _ = try state.take(.relation(Self.relation))
        _ = try state.take(.begin(finalLSN: 100, commitTime: 0, xid: 1))
        let nullKey = notes(try state.take(.insert(relation: 7, new: [.null, .text("nobody")])))
        #expect(nullKey.count == 1 && nullKey[0].level == .error && nullKey[0].message.hasPrefix("public.items: a row is not published"))
        let commit = committed(try state.take(.commit(commitLSN: 100, endLSN: 120, commitTime: 0)))
        #expect(records(commit).isEmpty)
    }

    @Test func aTransactionPastSpillRowsMovesToAFileAndSaysSoOnce() throws {
        var state = try state(spillRows: 2)
        _ = try state.take(.relation(Self.relation))
        _ = try state.take(.begin(finalLSN: 100, commitTime: 0, xid: 9))
        var said: [StreamNote] = []
        for id in 1...5 { said += notes(try state.take(.insert(relation: 7, new: [.text("\(id)"), .text("n\(id)")]))) }
        #expect(said == [.notice("transaction 9: more than 2 rows, staged in a temporary file until its commit")])
        let commit = committed(try state.take(.commit(commitLSN: 100, endLSN: 120, commitTime: 0)))
        #expect(commit?.spill != nil && commit?.changes.isEmpty == true && commit?.readsStore == true)
    }

    @Test func anUnsentValueWaitsForThePublishedRecord() throws {
        var state = try state()
        _ = try state.take(.relation(Self.relation))
        _ = try state.take(.begin(finalLSN: 100, commitTime: 0, xid: 1))
        _ = try state.take(.update(relation: 7, old: nil, new: [.text("1"), .unchangedToast]))
        let commit = committed(try state.take(.commit(commitLSN: 100, endLSN: 120, commitTime: 0)))
        #expect(records(commit).isEmpty)
        #expect(commit?.pending["items"]?["1"]?.row.unchanged == ["name"] && commit?.readsStore == true)
    }
}
