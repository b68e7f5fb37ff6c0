import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// The push rules of the store: per-field merge in commit order, idempotent batches,
/// create-only inserts, history.
@Suite struct PushTests {
    func batch(_ client: String, _ json: String) throws -> [ParsedMutation] {
        let parsed = try PushRequest.parse(Array(#"{"client":"\#(client)","mutations":[\#(json)]}"#.utf8))
        #expect(parsed.client == client)
        return parsed.mutations
    }

    func record(_ store: SQLiteDatabase, _ id: String) throws -> String? {
        try Fixtures.export(store, "notes").split(separator: "\n").first { $0.contains(#""id":"\#(id)""#) }.map(String.init)
    }

    func seeded() throws -> (TemporaryDirectory, SQLiteDatabase) {
        let dir = try TemporaryDirectory()
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(#"{"id":"n1","title":"a","body":"x"}"# + "\n" + #"{"id":"n2","title":"b"}"#, into: store, collection: "notes")
        return (dir, store)
    }

    @Test func patchesOfDifferentFieldsBothSurvive() throws {
        let (dir, store) = try seeded()
        defer { dir.remove() }
        _ = try store.push(try batch("phone", #"{"seq":1,"op":"patch","id":"n1","value":{"title":"A"}}"#), from: "phone", to: "notes")
        _ = try store.push(try batch("laptop", #"{"seq":1,"op":"patch","id":"n1","value":{"body":"Y"}}"#), from: "laptop", to: "notes")
        #expect(try record(store, "n1") == #"{"body":"Y","id":"n1","title":"A"}"#)
        // Both replaced values are in the history, newest first, with who replaced them.
        let history = try store.history(of: "n1", in: "notes")
        #expect(history.map(\.replacedBy) == ["laptop", "phone"])
        #expect(history.map { String(decoding: $0.value, as: UTF8.self) } == [
            #"{"body":"x","id":"n1","title":"A"}"#, #"{"body":"x","id":"n1","title":"a"}"#,
        ])
        #expect(history.map(\.version) == [2, 1])
        #expect(history.map(\.replacedIn) == [3, 2])
    }

    @Test func theLaterPushWinsASameFieldConflictAndTheLoserIsInHistory() throws {
        let (dir, store) = try seeded()
        defer { dir.remove() }
        _ = try store.push(try batch("a", #"{"seq":1,"op":"patch","id":"n1","value":{"title":"from a"}}"#), from: "a", to: "notes")
        _ = try store.push(try batch("b", #"{"seq":1,"op":"patch","id":"n1","value":{"title":"from b"}}"#), from: "b", to: "notes")
        #expect(try record(store, "n1") == #"{"body":"x","id":"n1","title":"from b"}"#)
        #expect(try store.history(of: "n1", in: "notes").first.map { String(decoding: $0.value, as: UTF8.self) } == #"{"body":"x","id":"n1","title":"from a"}"#)
    }

    @Test func aRetriedBatchGetsTheSameResultsAndCommitsNothing() throws {
        let (dir, store) = try seeded()
        defer { dir.remove() }
        let writes = try batch("c1", """
            {"seq":1,"op":"insert","id":"q1","value":{"a":1}},{"seq":2,"op":"insert","id":"n1","value":{}},{"seq":3,"op":"delete","id":"n2"}
            """)
        let first = try store.push(writes, from: "c1", to: "notes")
        #expect(first.response.committed)
        #expect(first.response.lastSeq == 3)
        let version = try #require(first.head?.version)
        #expect(first.response.results.map(\.status) == [
            .applied(version: version), .refused(MutationRefusal.exists("n1")), .applied(version: version),
        ])
        let again = try store.push(writes, from: "c1", to: "notes")
        #expect(again.response.results == first.response.results)
        #expect(!again.response.committed)
        #expect(try store.head(of: "notes")?.version == version)
        // A batch overlapping the processed ones applies only its new writes.
        let overlapping = try batch("c1", #"{"seq":3,"op":"delete","id":"n2"},{"seq":4,"op":"put","id":"q2","value":{"b":2}}"#)
        let third = try store.push(overlapping, from: "c1", to: "notes")
        #expect(third.response.results[0].status == .applied(version: version))
        #expect(third.head?.version == version + 1)
    }

    @Test func writeNumbersOutliveTheirResults() throws {
        let (dir, store) = try seeded()
        defer { dir.remove() }
        let writes = try batch("c1", #"{"seq":1,"op":"insert","id":"q1","value":{"a":1}}"#)
        _ = try store.push(writes, from: "c1", to: "notes", retention: PushRetention(results: -1, history: -1))
        // The result was pruned at once; the retry is still not applied twice.
        let again = try store.push(writes, from: "c1", to: "notes", retention: PushRetention(results: -1, history: -1))
        #expect(again.response.results.map(\.status) == [.duplicate])
        #expect(!again.response.committed)
        #expect(try store.history(of: "n1", in: "notes").isEmpty)
    }

    @Test func insertIsCreateOnlyAndDeleteOfTheUnknownSucceeds() throws {
        let (dir, store) = try seeded()
        defer { dir.remove() }
        _ = try store.push(try batch("a", #"{"seq":1,"op":"insert","id":"answer","value":{"choice":"a"}}"#), from: "a", to: "notes")
        let late = try store.push(try batch("b", """
            {"seq":1,"op":"insert","id":"answer","value":{"choice":"b"}},{"seq":2,"op":"delete","id":"never-there"},{"seq":3,"op":"patch","id":"never-there","value":{"x":1}}
            """), from: "b", to: "notes")
        #expect(try record(store, "answer") == #"{"choice":"a","id":"answer"}"#)
        #expect(late.response.results.map(\.status) == [
            .refused(.exists("answer")), .applied(version: 2), .refused(.notFound("never-there")),
        ])
        #expect(!late.response.committed)
    }

    @Test func aPoisonWriteIsRefusedAloneAndTheBatchIsOneVersion() throws {
        let (dir, store) = try seeded()
        defer { dir.remove() }
        let outcome = try store.push(try batch("c", """
            {"seq":1,"op":"put","id":"k1","value":{"v":1}},{"seq":2,"op":"put","id":"bad","value":[1]},
            {"seq":3,"op":"frobnicate","id":"k2"},{"seq":4,"op":"put","id":"k3","value":{"hidden":true}},
            {"seq":5,"op":"patch","id":"n1","value":{"id":"other"}},{"seq":6,"op":"put","id":"k4","value":{"v":4}}
            """), from: "c", to: "notes")
        let codes = outcome.response.results.map { result -> String in
            if case .refused(let refusal) = result.status { return refusal.code }
            return "ok"
        }
        #expect(codes == ["ok", "invalid_record", "invalid_mutation", "reserved_field", "id_mismatch", "ok"])
        #expect(outcome.head?.version == 2)
        #expect(try record(store, "k1") != nil && record(store, "k4") != nil)
    }

    @Test func togglesInOneBatchEndInTheLastAction() throws {
        let (dir, store) = try seeded()
        defer { dir.remove() }
        let outcome = try store.push(try batch("c", """
            {"seq":1,"op":"put","id":"fav","value":{"on":true}},{"seq":2,"op":"delete","id":"fav"},{"seq":3,"op":"put","id":"fav","value":{"on":true}},
            {"seq":4,"op":"delete","id":"n2"},{"seq":5,"op":"put","id":"n2","value":{"title":"b"}},{"seq":6,"op":"delete","id":"n2"}
            """), from: "c", to: "notes")
        #expect(try record(store, "fav") == #"{"id":"fav","on":true}"#)
        #expect(try record(store, "n2") == nil)
        #expect(outcome.head?.version == 2)
        let recomputed = try store.read { try $0.recomputedChecksum(of: "notes") }
        #expect(recomputed.checksum == outcome.head?.checksum && recomputed.count == outcome.head?.count)
    }

    @Test func aFirstPushCreatesTheCollection() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        // Nothing to commit: no collection appears, but the write number is kept.
        let nothing = try store.push(try batch("c", #"{"seq":1,"op":"delete","id":"x"}"#), from: "c", to: "fresh")
        #expect(nothing.head == nil && nothing.response.token == nil)
        #expect(try store.head(of: "fresh") == nil)
        let created = try store.push(try batch("c", #"{"seq":1,"op":"put","id":"x","value":{}},{"seq":2,"op":"put","id":"y","value":{}}"#), from: "c", to: "fresh")
        #expect(created.response.results.map(\.seq) == [1, 2])
        #expect(created.head?.count == 1)
    }

    @Test func batchesThatCannotBeReadAsAWholeAreRejected() {
        let bad = [
            #"not json"#, #"{"mutations":[]}"#, #"{"client":"","mutations":[]}"#, #"{"client":"a b","mutations":[]}"#,
            #"{"client":"c","mutations":{}}"#, #"{"client":"c","mutations":[{"op":"put","id":"x"}]}"#,
            #"{"client":"c","mutations":[{"seq":0,"op":"delete","id":"x"}]}"#,
            #"{"client":"c","mutations":[{"seq":2,"op":"delete","id":"x"},{"seq":2,"op":"delete","id":"y"}]}"#,
            #"{"client":"c","mutations":[{"seq":"1","op":"delete","id":"x"}]}"#,
        ]
        for body in bad {
            #expect(throws: PushRequestError.self, "\(body)") { try PushRequest.parse(Array(body.utf8)) }
        }
        let tooMany = (1...1001).map { #"{"seq":\#($0),"op":"delete","id":"x"}"# }.joined(separator: ",")
        #expect(throws: PushRequestError.self) { try PushRequest.parse(Array(#"{"client":"c","mutations":[\#(tooMany)]}"#.utf8)) }
    }

    @Test func aVersionOneStoreIsMigratedInPlace() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
            try Fixtures.importText(#"{"id":"n1","t":1}"#, into: store, collection: "notes")
        }
        let db = try SQLiteConnection(path: dir.file("s.sqlite"))
        try db.execute("""
            DROP TABLE push_clients; DROP TABLE push_results; DROP TABLE history; DROP TABLE publication; DROP TABLE source_positions;
            ALTER TABLE collections DROP COLUMN digest; DROP INDEX collections_by_published; ALTER TABLE collections DROP COLUMN published;
            PRAGMA user_version = 1
            """)
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        #expect(try db.scalarInt("PRAGMA user_version") == 9)  // every step since, up to the current schema
        // The watchers' change feed: every collection published at the sequence of the migration.
        #expect(try store.read { try $0.heads(publishedAfter: 0).heads.map(\.name) } == ["notes"])
        // Signed data: the digest of a store from before it is computed once, from the records.
        let digest = try store.read { try $0.digest(of: "notes") }
        let recomputed = try store.read { try $0.recomputedDigest(of: "notes") }
        #expect(digest == recomputed)
        #expect(try store.read { try $0.publicationSequence() } > 0)
        let outcome = try store.push(try batch("c", #"{"seq":1,"op":"patch","id":"n1","value":{"t":2}}"#), from: "c", to: "notes")
        #expect(outcome.head?.version == 2)
        #expect(try store.history(of: "n1", in: "notes").count == 1)
    }
}
