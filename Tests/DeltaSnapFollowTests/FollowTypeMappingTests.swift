import DeltaSnapCore
import DeltaSnapFollow
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTestSupport
import Foundation
import Testing

/// Issue 45's FOLLOW.md docs point: what PostgreSQL's edge values become — `infinity` and
/// `-infinity` (timestamps, dates, numeric), BC dates, years past 9999, domains, `money`,
/// `json` with duplicate keys — the same in the first copy and in the stream, on a real
/// PostgreSQL.
extension FollowCommandTests {
    static let edgeTable = """
        CREATE DOMAIN qty AS integer CHECK (VALUE >= 0);
        CREATE DOMAIN small_qty AS qty CHECK (VALUE < 100);
        CREATE DOMAIN label AS text;
        CREATE DOMAIN code AS char(4);
        CREATE TABLE edge(
            id int PRIMARY KEY,
            ts timestamptz, ts_minus timestamptz, ts_bc timestamptz, ts_far timestamptz, ts_now timestamptz,
            t timestamp, t_bc timestamp, t_far timestamp,
            d date, d_minus date, d_bc date, d_far date,
            n numeric, n_minus numeric, n_nan numeric, f float8,
            q qty, q2 small_qty, l label, c code,
            m money, m_minus money, m_list money[],
            j json, j_nested json, jb jsonb)
        """
    static let edgeValues = """
        'infinity', '-infinity', '0044-03-15 12:00:00+00 BC', '10000-01-01 00:00:00+00', '2026-11-27 06:20:56.5+00',
        'infinity', '0044-03-15 12:00:30.5 BC', '12026-11-27 06:20:56',
        'infinity', '-infinity', '0044-03-15 BC', '10000-01-01',
        'Infinity', '-Infinity', 'NaN', '-Infinity',
        5, 7, 'x', 'ab',
        '1234.5', '-0.07', '{1.5,1234}',
        '{"a":1,"a":2}', '{"b":{"c":1,"c":[2]},"a":true}', '{"a":1,"a":2}'
        """

    @Test func edgeValuesMapTheSameCopiedOrStreamed() async throws {
        let (copied, streamed) = try await Self.copiedAndStreamed(
            table: "edge", creating: Self.edgeTable.split(separator: ";").map(String.init), values: Self.edgeValues)
        #expect(copied.replacingOccurrences(of: #""id":"1""#, with: #""id":"2""#) == streamed, "\(copied)\n\(streamed)")

        let record = try JSONReader(bytes: Array(streamed.utf8)).readValue()
        let expected: [(String, String)] = [
            ("ts", #""infinity""#), ("ts_minus", #""-infinity""#), ("ts_bc", #""0044-03-15 12:00:00+00 BC""#),
            ("ts_far", #""10000-01-01 00:00:00+00""#), ("ts_now", #""2026-11-27T06:20:56.5Z""#),
            ("t", #""infinity""#), ("t_bc", #""0044-03-15 12:00:30.5 BC""#), ("t_far", #""12026-11-27 06:20:56""#),
            ("d", #""infinity""#), ("d_minus", #""-infinity""#), ("d_bc", #""0044-03-15 BC""#), ("d_far", #""10000-01-01""#),
            ("n", #""Infinity""#), ("n_minus", #""-Infinity""#), ("n_nan", #""NaN""#), ("f", #""-Infinity""#),
            ("q", "5"), ("q2", "7"), ("l", #""x""#), ("c", #""ab  ""#),
            ("m", "1234.50"), ("m_minus", "-0.07"), ("m_list", "[1.50,1234.00]"),
            ("j", #"{"a":2}"#), ("j_nested", #"{"a":true,"b":{"c":[2]}}"#), ("jb", #"{"a":2}"#),
        ]
        for (member, json) in expected {
            #expect(record[member].map(CanonicalJSON.string) == json, "\(member): \(streamed)")
        }
    }
}

@Suite struct PgEdgeValueMappingTests {
    @Test func whatRFC3339CannotWriteStaysPostgreSQLsText() {
        #expect(PgTextMapping.value("10000-01-01 00:00:00+00", type: PgType.timestamptz) == .string("10000-01-01 00:00:00+00"))
        #expect(PgTextMapping.value("0044-03-15 12:00:00+00 BC", type: PgType.timestamptz) == .string("0044-03-15 12:00:00+00 BC"))
        #expect(PgTextMapping.value("9999-12-31 23:59:59+00", type: PgType.timestamptz) == .string("9999-12-31T23:59:59Z"))
    }

    @Test func moneyIsItsAmount() {
        #expect(PgTextMapping.value("$1,234,567.50", type: PgType.money) == .number("1234567.50"))
        #expect(PgTextMapping.value("-$0.07", type: PgType.money) == .number("-0.07"))
        // Another locale's text is kept as written, never misread.
        #expect(PgTextMapping.value("1.234,50 €", type: PgType.money) == .string("1.234,50 €"))
    }

    @Test func jsonKeepsTheLastValueOfADuplicateKey() {
        #expect(PgTextMapping.value(#"{"a":1,"b":2,"a":3}"#, type: PgType.json) == (try? JSONReader(bytes: Array(#"{"a":3,"b":2}"#.utf8)).readValue()))
        // A record's own JSON still refuses them.
        #expect(throws: (any Error).self) { try JSONReader(bytes: Array(#"{"a":1,"a":2}"#.utf8)).readValue() }
    }
}
