import DeltaSnapPostgresStore
import DeltaSnapStore
import DeltaSnapStoreLocation
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
