import DeltaSnapCore
import DeltaSnapTrust
import Testing

/// The one write rule every writer shares (SQLite's writer, PostgreSQL's merge, a client's
/// apply): what counts as a change, and how count, checksum and digest move.
@Suite struct StateAccumulatorTests {
    func record(_ json: String) throws -> Record { try Record(json: Array(json.utf8)) }

    @Test func theRuleMovesCountChecksumAndDigestByExactlyWhatChanged() throws {
        var state = StateAccumulator(collection: "c", checksum: .empty, count: 0, digest: .empty)
        let a1 = try record(#"{"id":"a","v":1}"#), a2 = try record(#"{"id":"a","v":2}"#), b = try record(#"{"id":"b"}"#)
        #expect(state.put(a1, replacing: nil) == .upserted)
        #expect(state.put(b, replacing: nil) == .upserted)
        // Hiding what is absent is no change; so is writing the same bytes again.
        #expect(state.put(Record.tombstone(id: "zz"), replacing: nil) == .unchanged)
        let change = a1.bytes.withUnsafeBytes { old in
            state.put(a1, replacing: .init(isHidden: false, hash: a1.hash, bytes: old))
        }
        #expect(change == .unchanged)
        // A replaced value leaves, the new one enters; a hidden one leaves.
        _ = a1.bytes.withUnsafeBytes { state.put(a2, replacing: .init(isHidden: false, hash: a1.hash, bytes: $0)) }
        _ = b.bytes.withUnsafeBytes { state.put(Record.tombstone(id: "b"), replacing: .init(isHidden: false, hash: b.hash, bytes: $0)) }
        let tombstone = Record.tombstone(id: "b")
        let again = tombstone.bytes.withUnsafeBytes { state.put(tombstone, replacing: .init(isHidden: true, hash: 0, bytes: $0)) }
        #expect(again == .unchanged)

        var expected = StateChecksum.empty
        expected.add(hash: a2.hash)
        var digest = StateDigest.empty
        digest.add(collection: "c", id: "a", canonical: a2.bytes)
        #expect(state.count == 1 && state.checksum == expected && state.digest == digest)
        #expect(state.upserted == 3 && state.hidden == 1 && state.unchanged == 3)
    }
}
