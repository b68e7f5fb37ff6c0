import DeltaSnapCore
@testable import DeltaSnapPostgresStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Attachments on PostgreSQL come back byte for byte from their chunk rows, in order; an
/// empty blob (no chunk row) is held too; an unknown hash is not.
@Suite struct PostgresAttachmentTests {
    func reference(_ bytes: [UInt8]) throws -> AttachmentReference {
        var verifier = BlobVerifier(sha256: String(repeating: "0", count: 64), size: UInt64(bytes.count))
        try verifier.consume(bytes)
        return try AttachmentReference(sha256: verifier.digest, size: UInt64(bytes.count), type: "application/octet-stream")
    }

    @Test func aStoredBlobReadsBackByteForByte() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let cluster = try await PostgresCluster.start(in: dir.path)
        defer { cluster.stop() }
        let database = try await PostgresDatabase.connect(cluster.url)
        // Three chunk rows, the last one partial, written from chunks that straddle them.
        let bytes = noiseBytes(2_500_000, seed: 7)
        let blob = try reference(bytes)
        var offset = 0
        try await database.storeAttachment(blob) {
            guard offset < bytes.count else { return nil }
            defer { offset += 333_333 }
            return Array(bytes[offset..<min(bytes.count, offset + 333_333)])
        }
        var read: [UInt8] = []
        try await database.readAttachment(blob.sha256, range: 0..<2_500_000) { read += $0 }
        #expect(read == bytes)
        // A range inside one row, and one across a row boundary: only its bytes.
        for range in [UInt64(5)..<UInt64(17), UInt64(1_048_000)..<UInt64(2_097_200)] {
            var part: [UInt8] = []
            try await database.readAttachment(blob.sha256, range: range) { part += $0 }
            #expect(part == Array(bytes[Int(range.lowerBound)..<Int(range.upperBound)]))
        }

        let empty = try reference([])
        try await database.storeAttachment(empty) { nil }
        var emptyRead: [UInt8] = [1]
        try await database.readAttachment(empty.sha256, range: 0..<0) { emptyRead = $0 }
        #expect(emptyRead == [1], "an empty blob has no chunk to hand out")
        #expect(try await database.attachmentSize(empty.sha256) == 0)

        await #expect(throws: StoreError.self) {
            try await database.readAttachment(String(repeating: "e", count: 64), range: 0..<1) { _ in Issue.record("bytes of an unknown hash") }
        }
        await database.close()
    }

    /// A store whose blobs were written by schema v5 (chunk rows numbered, not named by
    /// offset) reads them back after the migration to v6.
    @Test func blobsOfASchemaFiveStoreReadBackAfterTheMigration() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let cluster = try await PostgresCluster.start(in: dir.path)
        defer { cluster.stop() }
        let bytes = noiseBytes(2_200_000, seed: 13)
        let blob = try reference(bytes)
        do {
            let database = try await PostgresDatabase.connect(cluster.url)
            var sent = false
            try await database.storeAttachment(blob) {
                defer { sent = true }
                return sent ? nil : bytes
            }
            await database.close()
        }
        // Back to v5 as it was: numbered chunk rows, no references or uploads.
        try await cluster.sql("""
            ALTER TABLE deltasnap_blob_chunks ALTER COLUMN start TYPE INTEGER USING (start / 1048576)::integer;
            ALTER TABLE deltasnap_blob_chunks RENAME COLUMN start TO seq;
            DROP TABLE deltasnap_attachment_refs; DROP TABLE deltasnap_attachment_orphans; DROP TABLE deltasnap_uploads;
            DROP TABLE deltasnap_source_positions; DROP TABLE deltasnap_attachment_possession;
            DELETE FROM deltasnap_schema WHERE version >= 6;
            """)
        let database = try await PostgresDatabase.connect(cluster.url)
        var read: [UInt8] = []
        try await database.readAttachment(blob.sha256, range: 1_000_000..<2_200_000) { read += $0 }
        #expect(read == Array(bytes[1_000_000...]))
        await database.close()
    }
}
