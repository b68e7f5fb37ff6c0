import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// The store maintains each collection's LtHash16 digest in the write transaction, like the
/// checksum: after any mix of writes it equals a recomputation, and the publication sequence
/// only rises.
@Suite struct StateDigestStoreTests {
    @Test func theMaintainedDigestEqualsARecomputationAfterEveryKindOfWrite() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        var sequences: [UInt64] = []
        func check() throws {
            let (maintained, recomputed, sequence) = try store.read {
                (try $0.digest(of: "items"), try $0.recomputedDigest(of: "items"), try $0.publicationSequence())
            }
            #expect(maintained == recomputed)
            sequences.append(sequence)
        }
        try Fixtures.importText(Fixtures.ndjson(0..<200), into: store, collection: "items")
        try check()
        try Fixtures.importText(Fixtures.ndjson(100..<300, revision: 1), into: store, collection: "items")  // changes and additions
        try check()
        try Fixtures.importText(#"{"id":"r0000005","hidden":true}"# + "\n" + #"{"id":"r0000006","hidden":true}"#, into: store, collection: "items")
        try check()
        try Fixtures.importText(Fixtures.ndjson(0..<10), into: store, collection: "items")  // un-hides 5 and 6
        try check()
        try Fixtures.importText(Fixtures.ndjson(50..<60), into: store, collection: "items", replace: true)  // hides the rest
        try check()
        _ = try store.compact("items", throughVersion: .max)  // tombstones go; the visible state stays
        try check()
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $0 <= $1 })
        #expect(Set(sequences.dropLast()).count == sequences.count - 1)  // every commit raised it; compaction did not
        #expect(try store.read { try $0.digest(of: "items") } != .empty)
        #expect(try store.read { try $0.digest(of: "missing") } == nil)
    }

    /// Another collection's state never enters this one's digest (the collection name is hashed in).
    @Test func digestsAreIndependentPerCollection() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<5), into: store, collection: "a")
        try Fixtures.importText(Fixtures.ndjson(0..<5), into: store, collection: "b")
        let (a, b) = try store.read { (try $0.digest(of: "a"), try $0.digest(of: "b")) }
        #expect(a != nil && a != b)
    }
}
