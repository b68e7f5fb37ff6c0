import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Attachments in both stores (SQLite's directory, PostgreSQL's chunk rows): kept only when
/// every byte is proven, the same bytes once, nothing left by a refused upload.
@Suite struct AttachmentStoreTests {
    /// `count` bytes of a repeating pattern (several PostgreSQL chunk rows when large).
    static func blob(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) } }

    static func reference(_ bytes: [UInt8], type: String = "application/octet-stream") throws -> AttachmentReference {
        var verifier = BlobVerifier(sha256: String(repeating: "0", count: 64), size: UInt64(bytes.count))
        try? verifier.consume(bytes)
        return try AttachmentReference(sha256: verifier.digest, size: UInt64(bytes.count), type: type)
    }

    /// `bytes` handed out `chunk` at a time.
    static func chunks(_ bytes: [UInt8], chunk: Int = 300_000) -> () async throws -> [UInt8]? {
        var offset = 0
        return {
            guard offset < bytes.count else { return nil }
            defer { offset += chunk }
            return Array(bytes[offset..<min(bytes.count, offset + chunk)])
        }
    }

    @Test(arguments: TestBackend.allCases)
    func aProvenBlobIsKeptAndABadOneLeavesNothing(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(backend, in: dir)
        do { try await check(database.store, backend) } catch {
            await database.stop()
            throw error
        }
        await database.stop()
    }

    private func check(_ store: any CollectionStore, _ backend: TestBackend) async throws {
        // Larger than one PostgreSQL chunk row (1 MiB), in chunks that straddle rows.
        let bytes = Self.blob(2_500_000)
        let reference = try Self.reference(bytes)
        #expect(try await store.attachmentSize(reference.sha256) == nil)
        try await store.storeAttachment(reference, from: Self.chunks(bytes))
        #expect(try await store.attachmentSize(reference.sha256) == 2_500_000)
        // The same bytes again (another caller): read and checked in full, kept once.
        try await store.storeAttachment(reference, from: Self.chunks(bytes, chunk: 1 << 20))
        #expect(try await store.attachmentSize(reference.sha256) == 2_500_000)

        var flipped = Self.blob(100_000)
        let other = try Self.reference(flipped)
        flipped[50_000] ^= 1
        for (bad, what) in [(flipped, "a flipped byte"), (Array(flipped.prefix(99_999)), "a short body"), (flipped + [0], "a long body")] {
            await #expect(performing: { try await store.storeAttachment(other, from: Self.chunks(bad, chunk: 7_000)) }, throws: { error in
                (error as? StoreError)?.code == .attachmentMismatch
            })
            #expect(try await store.attachmentSize(other.sha256) == nil, "\(backend): \(what) left a blob")
        }
    }

    @Test(arguments: TestBackend.allCases)
    func garbageCollectionKeepsWhatARecordOrItsHistoryRefersTo(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(backend, in: dir)
        do { try await collect(database) } catch {
            await database.stop()
            throw error
        }
        await database.stop()
    }

    private func collect(_ database: TestDatabase) async throws {
        let store = database.store
        let (kept, dropped, historic) = (Self.blob(3_000), Self.blob(4_000), Self.blob(5_000))
        let (a, b, c) = (try Self.reference(kept), try Self.reference(dropped), try Self.reference(historic))
        for (reference, bytes) in [(a, kept), (b, dropped), (c, historic)] { try await store.storeAttachment(reference, from: Self.chunks(bytes)) }
        try await database.importText(#"{"id":"n1","photo":\#(a)}"# + "\n" + #"{"id":"n2","photo":\#(c)}"#, collection: "notes")
        // n2 moves to `a`: its old value, with `c`, stays in history (for revert).
        let push = try PushRequest.parse(Array(#"{"client":"c1","mutations":[{"seq":1,"op":"put","id":"n2","value":{"photo":\#(a)}}]}"#.utf8))
        _ = try await store.push(push.mutations, from: "c1", user: nil, to: "notes", retention: PushRetention(), merge: .fields)

        let now = Int64(Date().timeIntervalSince1970)
        let grace = AttachmentGarbage.defaultGraceSeconds
        let first = try await store.collectAttachmentGarbage(unreferencedFor: grace, now: now - 10 * 86_400)
        #expect(first == AttachmentGarbage(removed: 0, bytesRemoved: 0, waiting: 1), "only the unreferenced blob waits")
        // Unreferenced for ten days by now, but stored within the grace period: its record may be on its way.
        let stored = try await store.collectAttachmentGarbage(unreferencedFor: grace, now: now)
        #expect(stored == AttachmentGarbage(removed: 0, bytesRemoved: 0, waiting: 1))
        #expect(try await store.attachmentSize(b.sha256) == 4_000, "removed before its grace period")
        let later = try await store.collectAttachmentGarbage(unreferencedFor: grace, now: now + 8 * 86_400)
        #expect(later == AttachmentGarbage(removed: 1, bytesRemoved: 4_000, waiting: 0))
        #expect(try await store.attachmentSize(b.sha256) == nil)
        let keptSize = try await store.attachmentSize(a.sha256)
        let historicSize = try await store.attachmentSize(c.sha256)
        #expect(keptSize == 3_000 && historicSize == 5_000)
        // Readable where history refers to it: a revert brings back a record whose file is there.
        #expect(try await store.attachment(c.sha256, in: "notes") == c)
        // The removed blob is gone for writers too.
        await #expect(performing: { try await database.importText(#"{"id":"n3","photo":\#(b)}"#, collection: "notes") }, throws: { error in
            (error as? ImportError)?.code == .missingAttachment
        })
    }
}
