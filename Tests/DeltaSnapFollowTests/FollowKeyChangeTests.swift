import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Issue 45 point 8: an update that changes the primary key and leaves a TOASTed value
/// alone sends that value as "unchanged" in the new row and only the key in the old one;
/// the value is the row's under its old key (in the store, or as the transaction left it).
extension FollowTests {
    @Test(arguments: TestBackend.allCases, [50_000, 1])
    func aKeyChangeKeepsTheLargeValueItLeftAlone(_ backend: TestBackend, spillRows: Int) async throws {
        let logs = CapturingLogHandler.Lines([])
        try await withFollower(backend, logs: logs, spillRows: spillRows) { source, store in
            try await Self.waitFor("countries", version: 1, in: store)
            try await source.run("ALTER TABLE countries ADD COLUMN notes text")
            try await source.run("ALTER TABLE countries ALTER COLUMN notes SET STORAGE EXTERNAL")
            let long = String(repeating: "Andorra la Vella. ", count: 2_000)
            let longer = String(repeating: "Paris. ", count: 3_000)
            var version = try #require(try await store.head(of: "countries")).version
            try await source.transaction(["UPDATE countries SET notes = '\(long)' WHERE code = 'AD'", "UPDATE countries SET notes = '\(longer)' WHERE code = 'FR'"])
            version += 1
            try await Self.waitFor("countries", version: version, in: store)

            // The key changes alone.
            try await source.run("UPDATE countries SET code = 'AE', population = 1 WHERE code = 'AD'")
            version += 1
            try await Self.waitFor("countries", version: version, in: store)
            #expect(try await store.record("AD", in: "countries")?.isHidden ?? true)
            let moved = try #require(try await store.record("AE", in: "countries")).text
            #expect(moved.contains(long) && moved.contains(#""population":1"#), "\(moved.prefix(200))")

            // After another update of the row in the same transaction; then twice more.
            try await source.transaction([
                "UPDATE countries SET population = 2 WHERE code = 'FR'",
                "UPDATE countries SET code = 'FX', name = 'France!' WHERE code = 'FR'",
                "UPDATE countries SET code = 'FY' WHERE code = 'FX'",
                "UPDATE countries SET code = 'AF', population = 3 WHERE code = 'AE'",
            ])
            version += 1
            try await Self.waitFor("countries", version: version, in: store)
            for hidden in ["FR", "FX", "AE"] {
                #expect(try await store.record(hidden, in: "countries")?.isHidden ?? true, "\(hidden)")
            }
            let france = try #require(try await store.record("FY", in: "countries")).text
            #expect(france.contains(longer) && france.contains(#""population":2"#) && france.contains(#""name":"France!""#), "\(france.prefix(200))")
            let andorra = try #require(try await store.record("AF", in: "countries")).text
            #expect(andorra.contains(long) && andorra.contains(#""population":3"#), "\(andorra.prefix(200))")
            #expect(!logs.withLock { $0 }.contains { $0.message.contains("is not published") })
        }
    }
}
