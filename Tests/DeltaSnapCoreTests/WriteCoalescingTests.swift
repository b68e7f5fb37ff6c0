import DeltaSnapCore
import Testing

/// The folding rule of queued writes, row by row, and that a folded write leaves the record
/// as the two writes in a row would.
@Suite struct WriteCoalescingTests {
    static func object(_ json: String) -> JSONValue { try! JSONReader(bytes: Array(json.utf8)).readValue() }

    static func write(_ seq: UInt64, _ operation: Mutation.Operation, _ json: String? = nil, id: String = "r1") -> Mutation {
        Mutation(seq: seq, operation: operation, id: id, value: json.map(object))
    }

    @Test func patchesMergeTheirFieldsAndKeepARemoval() {
        let folded = WriteCoalescing.fold(Self.write(2, .patch, #"{"a":null,"c":3}"#), into: Self.write(1, .patch, #"{"a":1,"b":2}"#))
        #expect(folded == .write(Self.write(1, .patch, #"{"a":null,"b":2,"c":3}"#)))
    }

    @Test func aPatchMergesIntoAPutOrAnInsertBeforeIt() {
        for operation in [Mutation.Operation.put, .insert] {
            let folded = WriteCoalescing.fold(Self.write(2, .patch, #"{"a":null,"c":3}"#), into: Self.write(1, operation, #"{"a":1,"b":2}"#))
            #expect(folded == .write(Self.write(1, operation, #"{"b":2,"c":3}"#)), "\(operation)")
        }
    }

    @Test func aPutReplacesWhatCameBeforeItButAnInsert() {
        for operation in [Mutation.Operation.put, .patch, .delete] {
            let earlier = Self.write(1, operation, operation == .delete ? nil : #"{"a":1}"#)
            #expect(WriteCoalescing.fold(Self.write(2, .put, #"{"b":2}"#), into: earlier) == .write(Self.write(1, .put, #"{"b":2}"#)))
        }
        // An insert is create-only: its refusal must still be possible, so the put stays apart.
        #expect(WriteCoalescing.fold(Self.write(2, .put, #"{"b":2}"#), into: Self.write(1, .insert, #"{"a":1}"#)) == nil)
    }

    @Test func aDeleteReplacesWhatCameBeforeItAndCancelsAnInsert() {
        for operation in [Mutation.Operation.put, .patch, .delete] {
            let earlier = Self.write(1, operation, operation == .delete ? nil : #"{"a":1}"#)
            #expect(WriteCoalescing.fold(Self.write(2, .delete), into: earlier) == .write(Self.write(1, .delete)))
        }
        #expect(WriteCoalescing.fold(Self.write(2, .delete), into: Self.write(1, .insert, #"{"a":1}"#)) == .nothing)
    }

    @Test func pairsThatMustStayApartDo() {
        #expect(WriteCoalescing.fold(Self.write(2, .insert, #"{"a":1}"#), into: Self.write(1, .delete)) == nil)
        #expect(WriteCoalescing.fold(Self.write(2, .patch, #"{"a":1}"#), into: Self.write(1, .delete)) == nil)
        #expect(WriteCoalescing.fold(Self.write(2, .patch, #"{"a":1}"#, id: "r2"), into: Self.write(1, .patch, #"{"a":0}"#)) == nil)
    }

    /// Every pair, applied one after the other and folded, on a present and an absent record:
    /// the same result whenever the fold applies and the two writes would both be accepted.
    @Test func aFoldedWriteLeavesTheRecordAsTheTwoWritesWould() throws {
        let values: [Mutation.Operation: String] = [.put: #"{"a":1,"b":2}"#, .patch: #"{"b":null,"c":3}"#, .insert: #"{"d":4}"#]
        let present = try Record(json: Array(#"{"a":0,"id":"r1","z":9}"#.utf8))
        for first in Mutation.Operation.allCases {
            for second in Mutation.Operation.allCases {
                let earlier = Self.write(1, first, values[first])
                let later = Self.write(2, second, values[second])
                guard let folded = WriteCoalescing.fold(later, into: earlier) else { continue }
                for start in [present, nil] {
                    let sequential: Record?
                    do { sequential = try RecordMerge.apply(later, to: try RecordMerge.apply(earlier, to: start)) } catch { continue }
                    switch folded {
                    case .write(let write):
                        #expect(write.seq == 1)
                        #expect(try RecordMerge.apply(write, to: start)?.bytes == sequential?.bytes, "\(first) then \(second) on \(String(describing: start?.text))")
                    case .nothing:
                        #expect(sequential == nil && start == nil, "\(first) then \(second)")
                    }
                }
            }
        }
    }
}
