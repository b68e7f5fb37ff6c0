import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import Foundation
import Testing

/// SQLite-only details of the store; its behaviour on both backends is `StoreContractTests`
/// (Tests/DeltaSnapPostgresTests), which replaced the versions/diff/replace/checksum/compaction
/// tests that were here.
@Suite struct StoreVersionTests {
    @Test func anInvalidPinnedEpochIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        #expect(throws: StoreError.invalidEpoch("XYZ")) {
            _ = try SQLiteDatabase(path: dir.file("t.sqlite"), configuration: StoreConfiguration(epochForNewCollections: "XYZ"))
        }
    }
}
