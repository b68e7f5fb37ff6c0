import DeltaSnapCore
import Testing

/// The folding rule of queued writes, row by row, and that a folded write leaves the record
/// as the two writes in a row would.
@Suite struct WriteCoalescingTests {
    static func object(_ json: String) -> JSONValue { try! JSONReader(bytes: Array(json.utf8)).readValue() }

    static func write(_ seq: UInt64, _ operation: Mutation.Operation, _ json: String? = nil, id: String = "r1") -> Mutation {
        Mutation(seq: seq, operation: operation, id: id, value: json.map(object))
    }

    /// Folds `later` into `earlier` for a record the server holds (or not).
    static func fold(_ later: Mutation, into earlier: Mutation, onServer: Bool = true) -> WriteCoalescing.Folded? {
        WriteCoalescing.fold(later, into: earlier, serverHasRecord: onServer)
    }

    @Test func patchesMergeTheirFieldsAndKeepARemoval() {
        let folded = Self.fold(Self.write(2, .patch, #"{"a":null,"c":3}"#), into: Self.write(1, .patch, #"{"a":1,"b":2}"#))
        #expect(folded == .write(Self.write(1, .patch, #"{"a":null,"b":2,"c":3}"#)))
    }

    @Test func aPatchMergesIntoAPutOrAnInsertBeforeIt() {
        for operation in [Mutation.Operation.put, .insert] {
            let folded = Self.fold(Self.write(2, .patch, #"{"a":null,"c":3}"#), into: Self.write(1, operation, #"{"a":1,"b":2}"#), onServer: false)
            #expect(folded == .write(Self.write(1, operation, #"{"b":2,"c":3}"#)), "\(operation)")
        }
        // Someone else's record came with a pull: the insert will be refused, the patch must land.
        #expect(Self.fold(Self.write(2, .patch, #"{"c":3}"#), into: Self.write(1, .insert, #"{"a":1}"#), onServer: true) == nil)
    }

    @Test func aPutReplacesAPutOrAPatchBeforeIt() {
        for operation in [Mutation.Operation.put, .patch] {
            let earlier = Self.write(1, operation, #"{"a":1}"#)
            #expect(Self.fold(Self.write(2, .put, #"{"b":2}"#), into: earlier) == .write(Self.write(1, .put, #"{"b":2}"#)))
        }
        // An insert is create-only: its refusal must still be possible, so the put stays apart;
        // a delete then a put stays two writes too (a conflict copy treats them apart).
        #expect(Self.fold(Self.write(2, .put, #"{"b":2}"#), into: Self.write(1, .insert, #"{"a":1}"#)) == nil)
        #expect(Self.fold(Self.write(2, .put, #"{"b":2}"#), into: Self.write(1, .delete)) == nil)
    }

    @Test func aDeleteReplacesWhatCameBeforeItAndCancelsAnInsertNeverPushed() {
        for operation in [Mutation.Operation.put, .patch, .delete] {
            let earlier = Self.write(1, operation, operation == .delete ? nil : #"{"a":1}"#)
            #expect(Self.fold(Self.write(2, .delete), into: earlier) == .write(Self.write(1, .delete)))
        }
        #expect(Self.fold(Self.write(2, .delete), into: Self.write(1, .insert, #"{"a":1}"#), onServer: false) == .nothing)
        // The server holds a record of that id (someone else's): the user's delete must reach it.
        #expect(Self.fold(Self.write(2, .delete), into: Self.write(1, .insert, #"{"a":1}"#), onServer: true) == .write(Self.write(1, .delete)))
    }

    @Test func pairsThatMustStayApartDo() {
        #expect(Self.fold(Self.write(2, .insert, #"{"a":1}"#), into: Self.write(1, .delete)) == nil)
        #expect(Self.fold(Self.write(2, .patch, #"{"a":1}"#), into: Self.write(1, .delete)) == nil)
        #expect(Self.fold(Self.write(2, .patch, #"{"a":1}"#, id: "r2"), into: Self.write(1, .patch, #"{"a":0}"#)) == nil)
    }

    /// A write as the server applies it: refused alone, leaving the record as it was.
    static func serverApply(_ mutation: Mutation, to record: Record?) -> Record? {
        do { return try RecordMerge.apply(mutation, to: record) } catch { return record }
    }

    /// Every pair, on a record the server holds and on an absent one: sent one after the
    /// other (each refused alone when it must be) and folded, the record ends the same.
    @Test func aFoldedWriteLeavesTheRecordAsTheTwoWritesWould() throws {
        let values: [Mutation.Operation: String] = [.put: #"{"a":1,"b":2}"#, .patch: #"{"b":null,"c":3}"#, .insert: #"{"d":4}"#]
        let present = try Record(json: Array(#"{"a":0,"id":"r1","z":9}"#.utf8))
        var folds = 0
        for first in Mutation.Operation.allCases {
            for second in Mutation.Operation.allCases {
                let earlier = Self.write(1, first, values[first])
                let later = Self.write(2, second, values[second])
                for start in [present, nil] {
                    guard let folded = WriteCoalescing.fold(later, into: earlier, serverHasRecord: start != nil) else { continue }
                    folds += 1
                    let sequential = Self.serverApply(later, to: Self.serverApply(earlier, to: start))
                    let result: Record? = switch folded {
                    case .write(let write): Self.serverApply(write, to: start)
                    case .nothing: start
                    }
                    #expect(result?.bytes == sequential?.bytes, "\(first) then \(second) on \(String(describing: start?.text))")
                    if case .write(let write) = folded { #expect(write.seq == 1) }
                }
            }
        }
        #expect(folds == 17)  // the table's rows, on each start they apply to
    }
}
