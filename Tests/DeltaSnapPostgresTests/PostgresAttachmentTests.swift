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
        let cluster = try PostgresCluster.start(in: dir.path)
        defer { cluster.stop() }
        let database = try await PostgresDatabase.connect(cluster.url)
        // Three chunk rows, the last one partial, written from chunks that straddle them.
        let bytes = (0..<2_500_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) }
        let blob = try reference(bytes)
        var offset = 0
        try await database.storeAttachment(blob) {
            guard offset < bytes.count else { return nil }
            defer { offset += 333_333 }
            return Array(bytes[offset..<min(bytes.count, offset + 333_333)])
        }
        var read: [UInt8] = []
        #expect(try await database.readAttachment(blob.sha256) { read += $0 })
        #expect(read == bytes)

        let empty = try reference([])
        try await database.storeAttachment(empty) { nil }
        var emptyRead: [UInt8] = [1]
        #expect(try await database.readAttachment(empty.sha256) { emptyRead = $0 })
        #expect(emptyRead == [1], "an empty blob has no chunk to hand out")
        #expect(try await database.attachmentSize(empty.sha256) == 0)

        #expect(try await !database.readAttachment(String(repeating: "e", count: 64)) { _ in Issue.record("bytes of an unknown hash") })
        await database.close()
    }
}
