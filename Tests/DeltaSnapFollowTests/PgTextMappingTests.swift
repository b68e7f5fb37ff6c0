import DeltaSnapCore
import Testing

@testable import DeltaSnapFollow

/// The type mapping of docs/FOLLOW.md, the position a follower records, and how rows are
/// named: the pure parts of `deltasnap follow`.
@Suite struct PgTextMappingTests {
    func json(_ value: JSONValue) -> String { CanonicalJSON.string(value) }

    @Test func valuesMapByTheirType() {
        #expect(PgTextMapping.value("t", type: PgType.bool) == .bool(true))
        #expect(PgTextMapping.value("f", type: PgType.bool) == .bool(false))
        #expect(PgTextMapping.value("-42", type: PgType.int8) == .number("-42"))
        // numeric keeps every digit; NaN and the infinities have no JSON number.
        #expect(PgTextMapping.value("12345678901234567890.123456789", type: PgType.numeric) == .number("12345678901234567890.123456789"))
        #expect(PgTextMapping.value("NaN", type: PgType.numeric) == .string("NaN"))
        #expect(PgTextMapping.value("-Infinity", type: PgType.float8) == .string("-Infinity"))
        #expect(PgTextMapping.value("1.5e-07", type: PgType.float8) == .number("1.5e-07"))
        #expect(json(PgTextMapping.value(#"{"b": [1, 2.50], "a": null}"#, type: PgType.jsonb)) == #"{"a":null,"b":[1,2.50]}"#)
        #expect(PgTextMapping.value("2026-11-27 06:20:56.5+00", type: PgType.timestamptz) == .string("2026-11-27T06:20:56.5Z"))
        #expect(PgTextMapping.value("2026-11-27 06:20:56+05:30", type: PgType.timestamptz) == .string("2026-11-27T06:20:56+05:30"))
        #expect(PgTextMapping.value("2026-11-27 06:20:56", type: PgType.timestamp) == .string("2026-11-27T06:20:56"))
        #expect(PgTextMapping.value("infinity", type: PgType.timestamptz) == .string("infinity"))
        #expect(PgTextMapping.value(#"\x00ff10"#, type: PgType.bytea) == .string("AP8Q"))
        #expect(PgTextMapping.value("Andorra", type: 25) == .string("Andorra"))
    }

    @Test func arraysMapElementByElement() {
        #expect(json(PgTextMapping.value("{1,2,NULL}", type: 1007)) == "[1,2,null]")
        #expect(json(PgTextMapping.value(#"{"a b","c\"d",plain}"#, type: 1009)) == #"["a b","c\"d","plain"]"#)
        #expect(json(PgTextMapping.value("{{1,2},{3,4}}", type: 1007)) == "[[1,2],[3,4]]")
        #expect(json(PgTextMapping.value("{}", type: 1007)) == "[]")
        #expect(json(PgTextMapping.value("[0:1]={7,8}", type: 1007)) == "[7,8]")
        #expect(json(PgTextMapping.value("{t,f}", type: 1000)) == "[true,false]")
        // Not an array literal after all: kept as text rather than lost.
        #expect(PgTextMapping.value("{1,2", type: 1007) == .string("{1,2"))
    }

    @Test func aPositionSurvivesItsText() throws {
        let snapshot = try #require(CopySnapshot(parsing: "100:105:101,103", boundary: 0x16B_3700))
        let position = FollowPosition(
            applied: 0x1_0000_2000, copy: snapshot, columns: ["public.t": [PgRelation.Column(name: "id", typeOID: 23, isKey: false)]])
        #expect(FollowPosition(parsing: position.text) == position)
        #expect(position.text.contains(#""applied":"1/2000""#))
        #expect(FollowPosition(parsing: "{}") == nil)
        #expect(PgOutputMessage.lsn("16/B374D848") == 0x16_B374_D848)
        #expect(PgOutputMessage.lsnText(0x16_B374_D848) == "16/B374D848")
        #expect(PgOutputMessage.lsn("16B374D848") == nil)
    }

    @Test func theCopyHoldsExactlyTheTransactionsItsSnapshotSaw() throws {
        let snapshot = try #require(CopySnapshot(parsing: "100:105:101,103", boundary: 1000))
        #expect(snapshot.holds(xid: 99, commitLSN: 500))  // finished before the snapshot
        #expect(snapshot.holds(xid: 102, commitLSN: 500))
        #expect(!snapshot.holds(xid: 101, commitLSN: 500))  // running then: not in the copy
        #expect(!snapshot.holds(xid: 105, commitLSN: 500))  // began after
        #expect(!snapshot.holds(xid: 99, commitLSN: 1000))  // at or after the boundary: never held
    }

    @Test func rowsAreNamedByTheirKeyAndPartition() throws {
        let columns = [
            PgRelation.Column(name: "user_id", typeOID: 25, isKey: true), PgRelation.Column(name: "id", typeOID: 23, isKey: true),
            PgRelation.Column(name: "score", typeOID: 23, isKey: false),
        ]
        let attempts = try TableShape(table: FollowedTable(schema: "public", table: "attempts", collection: "attempts", partitionBy: "user_id"), columns: columns, key: ["user_id", "id"])
        let row = try attempts.record(from: [.text("alice"), .text("7"), .null]).get()
        #expect(row.path == "attempts/alice")
        #expect(row.record.text == #"{"id":"7","score":null,"user_id":"alice"}"#)
        #expect(throws: TableShape.RowProblem.badPartition("user_id", "a b")) { try attempts.record(from: [.text("a b"), .text("7"), .null]).get() }
        #expect(throws: TableShape.RowProblem.unchangedValue("score")) { try attempts.record(from: [.text("a"), .text("7"), .unchangedToast]).get() }

        let pairs = try TableShape(
            table: FollowedTable(schema: "s", table: "pairs", collection: "pairs"),
            columns: [PgRelation.Column(name: "a", typeOID: 25, isKey: true), PgRelation.Column(name: "b", typeOID: 25, isKey: true)], key: ["a", "b"])
        #expect(try pairs.record(from: [.text("x/1"), .text("50%")]).get().record.id == "x%2F1/50%25")
        #expect(throws: FollowError.self) {
            try TableShape(table: FollowedTable(schema: "s", table: "t", collection: "t"), columns: [PgRelation.Column(name: "hidden", typeOID: 16, isKey: false)], key: ["x"])
        }
        #expect(throws: FollowError.self) { try TableShape(table: FollowedTable(schema: "s", table: "t", collection: "t"), columns: columns, key: []) }
    }

    @Test func tableOptionsName() throws {
        #expect(try FollowedTable(parsing: "public.attempts=attempts", partitionBy: "user_id") == FollowedTable(schema: "public", table: "attempts", collection: "attempts", partitionBy: "user_id"))
        #expect(try FollowedTable(parsing: "countries", partitionBy: nil).qualifiedName == "public.countries")
        #expect(throws: FollowError.self) { try FollowedTable(parsing: "public.Countries", partitionBy: nil) }
        #expect(throws: FollowError.self) { try FollowedTable(parsing: "a.b.c", partitionBy: nil) }
    }

    @Test func pgoutputMessagesDecode() throws {
        // Begin: final LSN, commit time, xid.
        var begin: [UInt8] = [UInt8(ascii: "B")]
        begin += [0, 0, 0, 1, 0, 0, 0x20, 0] + [0, 0, 0, 0, 0, 0, 0, 9] + [0, 0, 0, 42]
        #expect(try PgOutputMessage(decoding: begin) == .begin(finalLSN: 0x1_0000_2000, commitTime: 9, xid: 42))
        // Insert into relation 7 of ("a", NULL, unchanged).
        var insert: [UInt8] = [UInt8(ascii: "I"), 0, 0, 0, 7, UInt8(ascii: "N"), 0, 3]
        insert += [UInt8(ascii: "t"), 0, 0, 0, 1, UInt8(ascii: "a"), UInt8(ascii: "n"), UInt8(ascii: "u")]
        #expect(try PgOutputMessage(decoding: insert) == .insert(relation: 7, new: [.text("a"), .null, .unchangedToast]))
        #expect(throws: PgOutputError.self) { try PgOutputMessage(decoding: Array(insert.dropLast(4))) }
        #expect(try PgOutputMessage(decoding: [UInt8(ascii: "M")]) == .other(UInt8(ascii: "M")))
    }
}
