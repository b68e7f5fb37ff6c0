import DeltaSnapPostgresStore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTestSupport
import Testing

/// What `--db` (and `--read-db`) accept, and how a location is printed (never a password).
@Suite struct StoreLocationTests {
    @Test func pathsAndURLsAreToldApart() throws {
        #expect(try StoreLocation("deltasnap.sqlite") == .sqlite(path: "deltasnap.sqlite"))
        #expect(try StoreLocation("/tmp/postgres://x") == .sqlite(path: "/tmp/postgres://x"))
        #expect(try StoreLocation("postgres://u@h/db") == .postgres(url: "postgres://u@h/db", readReplica: nil))
        #expect(try StoreLocation("postgresql://u@h/db", readReplica: "postgres://u@r/db") == .postgres(url: "postgresql://u@h/db", readReplica: "postgres://u@r/db"))
    }

    @Test func aReadReplicaNeedsPostgreSQLOnBothSides() {
        #expect(throws: StoreError.self) { try StoreLocation("s.sqlite", readReplica: "postgres://u@r/db") }
        #expect(throws: StoreError.self) { try StoreLocation("postgres://u@h/db", readReplica: "replica.sqlite") }
        #expect(throws: StoreError.self) { try StoreLocation("") }
    }

    @Test func aPasswordIsNeverPrinted() throws {
        #expect(try StoreLocation("postgres://app:s3cret@db.example:5432/prod?sslmode=require").description == "postgres://app@db.example:5432/prod?sslmode=require")
        #expect(try StoreLocation("postgres://app@db.example/prod").description == "postgres://app@db.example/prod")
        #expect(PostgresURL.withoutPassword("postgres://a:b@h/d@x") == "postgres://a@h/d@x")
        #expect(try StoreLocation("s.sqlite").description == "s.sqlite")
    }
}

/// A store error says what a caller acts on (its code), in one line, and carries the
/// database's own error instead of flattening it into text.
@Suite struct StoreErrorTests {
    @Test func anUnreachableServerIsUnavailableWithTheDriversErrorAttached() async throws {
        do {
            let store = try await StoreLocation("postgres://nobody@127.0.0.1:1/nothing").open()
            await store.close()
            Issue.record("connected to a closed port")
        } catch let error as StoreError {
            #expect(error.code == .unavailable)
            #expect(error.message.hasPrefix("cannot reach PostgreSQL at postgres://nobody@127.0.0.1:1/nothing: "), "\(error)")
            #expect(!error.message.contains("\n"))
            #expect(error.underlying != nil)
        }
    }

    @Test func aWriteToAStoreOpenedReadOnlySaysSo() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("s.sqlite")
        _ = try await SQLiteCollectionStore(path: path).importBatch(Array(#"{"id":"a"}"#.utf8), into: "items")
        let readOnly = try SQLiteCollectionStore(path: path, readOnly: true)
        await #expect(throws: StoreError.readOnly(path)) { _ = try await readOnly.importBatch(Array(#"{"id":"b"}"#.utf8), into: "items") }
        // Equal by code and message; the codes are values a caller switches over.
        #expect(StoreError.readOnly(path).code == .readOnly && StoreError.busy("x").code != .readOnly)
    }
}
