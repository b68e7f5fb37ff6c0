import DeltaSnapCore
@testable import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// The SQLite store's attachments directory: a blob is kept only once its size and SHA-256
/// are proven, atomically; a bad upload leaves nothing behind.
@Suite struct BlobDirectoryTests {
    static let test = (sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", bytes: Array("test".utf8))

    let queue = BlockingQueue(label: "test")

    func chunks(_ bytes: [UInt8], chunk: Int = 3) -> () async throws -> [UInt8]? {
        AttachmentStoreTests.chunks(bytes, chunk: chunk)
    }

    @Test func aVerifiedBlobIsKeptOnceUnderItsHash() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let blobs = BlobDirectory(databasePath: dir.file("s.sqlite"))
        #expect(!blobs.contains(Self.test.sha256))
        try await blobs.store(sha256: Self.test.sha256, size: 4, finishingOn: queue, from: chunks(Self.test.bytes))
        #expect(blobs.contains(Self.test.sha256) && blobs.size(of: Self.test.sha256) == 4)
        #expect(try Data(contentsOf: URL(fileURLWithPath: blobs.path(of: Self.test.sha256))) == Data(Self.test.bytes))
        // The same bytes again: read in full, stored once.
        try await blobs.store(sha256: Self.test.sha256, size: 4, finishingOn: queue, from: chunks(Self.test.bytes, chunk: 1))
        #expect(blobs.hashes() == [Self.test.sha256])
        #expect(blobs.remove(Self.test.sha256) && !blobs.contains(Self.test.sha256) && !blobs.remove(Self.test.sha256))
    }

    @Test(arguments: [
        (Array("tesT".utf8), UInt64(4)),  // other bytes under the hash (a flipped byte)
        (Array("tes".utf8), UInt64(4)),  // cut short
        (Array("testing".utf8), UInt64(4)),  // longer than stated
        (Array("test".utf8), UInt64(5)),  // a size the bytes do not have
    ])
    func bytesThatAreNotWhatTheReferenceSaysAreRefusedAndNothingIsKept(_ bytes: [UInt8], _ size: UInt64) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let blobs = BlobDirectory(databasePath: dir.file("s.sqlite"))
        await #expect {
            try await blobs.store(sha256: Self.test.sha256, size: size, finishingOn: queue, from: chunks(bytes))
        } throws: { error in
            (error as? StoreError)?.code == .attachmentMismatch
        }
        #expect(!blobs.contains(Self.test.sha256))
        #expect(try FileManager.default.contentsOfDirectory(atPath: blobs.root + "/tmp").isEmpty)
    }

    @Test func leftoversOfAnInterruptedWriteAreRemovedAtOpening() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let blobs = BlobDirectory(databasePath: dir.file("s.sqlite"))
        try FileManager.default.createDirectory(atPath: blobs.root + "/tmp", withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: blobs.root + "/tmp/partial", contents: Data([1, 2, 3])))
        // The store's writer cleans up at its opening.
        _ = try SQLiteCollectionStore(path: dir.file("s.sqlite"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: blobs.root + "/tmp").isEmpty)
    }

    @Test func aStoreWithoutAttachmentsHasNoDirectoryBesideIt() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteCollectionStore(path: dir.file("s.sqlite"))
        _ = try await store.importBatch(Array(#"{"id":"a"}"#.utf8), into: "items")
        #expect(!FileManager.default.fileExists(atPath: dir.file("s.sqlite.attachments")))
    }
}
