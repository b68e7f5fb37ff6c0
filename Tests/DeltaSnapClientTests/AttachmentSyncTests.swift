import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Files that travel with records, through a real server on 127.0.0.1 and real replicas:
/// attached offline, uploaded before the write that needs them (resuming at the server's
/// offset), downloaded eagerly or on first use (resuming with `Range`), proven before they
/// are visible, released with their record, bundled.
@Suite struct AttachmentSyncTests {
    struct World {
        let dir: TemporaryDirectory
        let store: SQLiteDatabase
        let server: TestServer

        var url: URL { URL(string: "\(server.baseURL)/v1/collections/notes")! }

        func replica(_ name: String, transport: any SyncTransport = URLSessionTransport(), bundle: String? = nil) throws -> DeltaSnapReplica {
            try DeltaSnapReplica(
                path: dir.file("\(name).sqlite"), collection: "notes", url: url, bundledSnapshot: bundle, transport: transport,
                retryPolicy: RetryPolicy(initialDelay: 0.01, maximumDelay: 0.05), timeout: .seconds(10), accessToken: TestServer.writeToken)
        }

        /// The server's count of attachment bytes sent so far.
        func bytesServed() async throws -> Int {
            let server = self.server
            let metrics = try await offPool { try server.connect().request("GET", "/metrics", headers: ["Authorization": "Bearer \(TestServer.writeToken)"]) }
            let line = metrics.text.split(separator: "\n").first { $0.hasPrefix("deltasnap_attachment_bytes_sent_total ") }
            return line.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
        }
    }

    func withWorld(_ body: (World) async throws -> Void) async throws {
        try await TestServer.withDirectory(seed: { try Fixtures.importText(#"{"id":"n0","title":"no photo"}"#, into: try SQLiteDatabase(path: $0), collection: "notes") }) { server, dir in
            try await body(World(dir: dir, store: try SQLiteDatabase(path: dir.file("s.sqlite")), server: server))
        }
    }

    static func photo(_ count: Int, seed: UInt8 = 1) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) &+ seed } }

    /// Writes `bytes` to a file in `dir` and attaches it to `replica` as an image.
    func attach(_ bytes: [UInt8], to replica: DeltaSnapReplica, in dir: TemporaryDirectory, name: String = "photo.jpg") async throws -> AttachmentReference {
        let file = dir.file(name)
        FileManager.default.createFile(atPath: file, contents: Data(bytes))
        return try await replica.attach(URL(fileURLWithPath: file), type: "image/jpeg")
    }

    @Test func aFileAttachedOfflineTravelsWithItsRecordAndReachesOtherDevices() async throws {
        try await withWorld { world in
            // Each device's answers land in a directory of its own, which every sync must
            // leave empty: a finished upload's answer used to stay there, one file per upload.
            let temporary = (phone: world.dir.file("phone-tmp"), tablet: world.dir.file("tablet-tmp"))
            for path in [temporary.phone, temporary.tablet] { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
            func leftBehind() throws -> [String] {
                try [temporary.phone, temporary.tablet].flatMap { try FileManager.default.contentsOfDirectory(atPath: $0) }
            }
            let phone = try world.replica("phone", transport: URLSessionTransport(temporaryDirectory: URL(fileURLWithPath: temporary.phone)))
            let bytes = Self.photo(300_000)
            let reference = try await attach(bytes, to: phone, in: world.dir)
            try await phone.put(id: "n1", json: #"{"title":"Beach","photo":\#(reference)}"#)
            #expect(try await phone.attachmentStatuses().map(\.state) == ["pending-upload"])
            let outcome = await phone.sync(ignoringBackoff: true)
            let pushed = await phone.lastPushReport
            #expect(pushed.accepted == 1, "\(outcome) \(pushed)")
            let uploaded = await phone.lastAttachmentReport
            #expect(uploaded.uploaded == 1 && uploaded.uploadedBytes == 300_000, "\(uploaded)")
            #expect(try await phone.attachmentStatuses().map(\.state) == ["cached"])
            #expect(try Fixtures.export(world.store, "notes").contains(reference.sha256))

            // Another device, eager by default: the sync brings the record and its file.
            let tablet = try world.replica("tablet", transport: URLSessionTransport(temporaryDirectory: URL(fileURLWithPath: temporary.tablet)))
            await tablet.sync(ignoringBackoff: true)
            let downloaded = await tablet.lastAttachmentReport
            #expect(downloaded.downloaded == 1 && downloaded.downloadedBytes == 300_000, "\(downloaded)")
            let file = try await tablet.attachment(reference)
            #expect(Array(try Data(contentsOf: file)) == bytes)
            // Nothing more to fetch next time.
            await tablet.sync(ignoringBackoff: true)
            #expect(await tablet.lastAttachmentReport.downloaded == 0)

            // The record deleted: its file is let go on both devices.
            try await phone.delete(id: "n1")
            await phone.sync(ignoringBackoff: true)
            await tablet.sync(ignoringBackoff: true)
            #expect(try await tablet.attachmentStatuses().isEmpty)
            #expect(!FileManager.default.fileExists(atPath: file.path), "a deleted record's file stayed")
            #expect(try leftBehind() == [], "answers' temporary files left behind")
        }
    }

    @Test func lazyDownloadsOnlyWhatIsShownAndOnce() async throws {
        try await withWorld { world in
            let phone = try world.replica("phone")
            let (first, second) = (Self.photo(100_000, seed: 2), Self.photo(120_000, seed: 3))
            let a = try await attach(first, to: phone, in: world.dir, name: "a.jpg")
            let b = try await attach(second, to: phone, in: world.dir, name: "b.jpg")
            try await phone.put(id: "n1", json: #"{"photo":\#(a)}"#)
            try await phone.put(id: "n2", json: #"{"photos":[\#(b)]}"#)
            await phone.sync(ignoringBackoff: true)
            #expect(await phone.lastAttachmentReport.uploaded == 2)

            let reader = try world.replica("reader")
            await reader.setAttachmentPolicy(.lazy)
            let before = try await world.bytesServed()
            await reader.sync(ignoringBackoff: true)
            #expect(try await world.bytesServed() == before, "a lazy sync downloaded attachment bytes")
            #expect(try await reader.attachmentStatuses().map(\.state) == ["remote", "remote"])
            let shown = try await reader.attachment(a)
            #expect(Array(try Data(contentsOf: shown)) == first)
            _ = try await reader.attachment(a)
            #expect(try await world.bytesServed() == before + 100_000, "exactly that blob, once")
        }
    }

    @Test func aCompromisedMirrorsBytesAreRefusedAndNothingIsVisible() async throws {
        try await withWorld { world in
            let phone = try world.replica("phone")
            let bytes = Self.photo(50_000, seed: 4)
            let reference = try await attach(bytes, to: phone, in: world.dir)
            try await phone.put(id: "n1", json: #"{"photo":\#(reference)}"#)
            await phone.sync(ignoringBackoff: true)

            let mirror = CompromisedMirror()
            mirror.rewrite = { url, body in
                guard url.path.contains("/attachments/") else { return nil }
                var forged = body
                forged[100] ^= 0x20
                return forged
            }
            let victim = try world.replica("victim", transport: mirror)
            await victim.sync(ignoringBackoff: true)
            let report = await victim.lastAttachmentReport
            #expect(report.downloaded == 0 && report.failures.count == 1, "\(report)")
            #expect(try await victim.attachmentStatuses().map(\.state) == ["remote"])
            await #expect(throws: AttachmentError.self) { _ = try await victim.attachment(reference) }
            // The record is there; the forged file is not.
            #expect(try await victim.record(id: "n1") != nil)
            mirror.rewrite = nil
            #expect(Array(try Data(contentsOf: try await victim.attachment(reference))) == bytes)
        }
    }

    @Test func cutTransfersResumeWhereTheyStopped() async throws {
        try await withWorld { world in
            // An upload begun by a run that was killed: half the bytes are on the server.
            let phone = try world.replica("phone")
            let bytes = Self.photo(2_000_000, seed: 5)
            let reference = try await attach(bytes, to: phone, in: world.dir)
            let server = world.server
            let begun = try await offPool {
                try server.connect().request(
                    "POST", "/v1/collections/notes/attachments/\(reference.sha256)",
                    headers: ["Authorization": "Bearer \(TestServer.writeToken)", "Upload-Draft-Interop-Version": "9", "Upload-Complete": "?0",
                              "Upload-Length": "2000000"],
                    body: Array(bytes[0..<1_000_000]))
            }
            let location = try #require(begun.header("Location"))
            try Data("\(world.server.baseURL)\(location)".utf8).write(
                to: URL(fileURLWithPath: world.dir.file("phone.sqlite.attachments/pending/\(reference.sha256).location")))
            try await phone.put(id: "n1", json: #"{"photo":\#(reference)}"#)
            await phone.sync(ignoringBackoff: true)
            let report = await phone.lastAttachmentReport
            #expect(report.uploaded == 1 && report.uploadedBytes == 1_000_000, "the upload did not resume at the server's offset: \(report)")
            #expect(await phone.lastPushReport.accepted == 1)

            // A download cut after 1.5 MB: the rest only.
            let reader = try world.replica("reader")
            await reader.setAttachmentPolicy(.lazy)
            await reader.sync(ignoringBackoff: true)
            let partial = world.dir.file("reader.sqlite.attachments/partial/\(reference.sha256)")
            try FileManager.default.createDirectory(atPath: (partial as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            FileManager.default.createFile(atPath: partial, contents: Data(bytes[0..<1_500_000]))
            let before = try await world.bytesServed()
            #expect(Array(try Data(contentsOf: try await reader.attachment(reference))) == bytes)
            #expect(try await world.bytesServed() - before == 500_000)
        }
    }

    @Test func anEagerSyncOverTheBudgetPostponesTheFilesAndKeepsTheRecords() async throws {
        try await withWorld { world in
            let phone = try world.replica("phone")
            let reference = try await attach(Self.photo(400_000, seed: 6), to: phone, in: world.dir)
            try await phone.put(id: "n1", json: #"{"photo":\#(reference)}"#)
            await phone.sync(ignoringBackoff: true)

            let metered = try world.replica("metered")
            await metered.setNetworkBudget(.metered(maximumBodyBytes: 100_000))
            await metered.sync(ignoringBackoff: true)
            #expect(await metered.lastAttachmentReport.postponed == 1)
            #expect(try await metered.record(id: "n1") != nil)
            #expect(try await metered.attachmentStatuses().map(\.state) == ["remote"])
            await metered.setNetworkBudget(.unlimited)
            await metered.sync(ignoringBackoff: true)
            #expect(await metered.lastAttachmentReport.downloaded == 1, "the postponed file was not fetched once the budget allowed")
        }
    }

    @Test func aThousandBundledFilesAreUsedAtFirstStartWithoutADownload() async throws {
        try await withWorld { world in
            // A thousand records, each with its own file, written by the data owner.
            let owner = try SQLiteCollectionStore(path: world.dir.file("s.sqlite"))
            var lines: [String] = []
            var references: [AttachmentReference] = []
            for index in 0..<1_000 {
                let bytes = Self.photo(1_000 + index, seed: UInt8(truncatingIfNeeded: index))
                let reference = try AttachmentReference(sha256: AttachmentVerifier.sha256(of: bytes), size: UInt64(bytes.count), type: "image/png")
                var sent = false
                try await owner.storeAttachment(reference) {
                    defer { sent = true }
                    return sent ? nil : bytes
                }
                references.append(reference)
                lines.append(#"{"id":"p\#(index)","photo":\#(reference)}"#)
            }
            _ = try await owner.importBatch(Array(lines.joined(separator: "\n").utf8), into: "notes")
            let out = world.dir.file("bundle")
            let (_, files) = try await owner.bake("notes", into: out, withAttachments: true)
            #expect(files.count == 1_000)
            await owner.close()

            let before = try await world.bytesServed()
            let fresh = try world.replica("fresh", bundle: "\(out)/notes.snapshot")
            #expect(Array(try Data(contentsOf: try await fresh.attachment(references[7]))) == Self.photo(1_007, seed: 7))
            await fresh.sync(ignoringBackoff: true)
            #expect(try await world.bytesServed() == before, "a bundled file was downloaded")
            let states = try await fresh.attachmentStatuses()
            #expect(states.count == 1_000 && states.allSatisfy { $0.state == "cached" })
        }
    }

    /// A proxy that flips one byte of an upload: the server refuses it and keeps nothing, the
    /// write waits, and the file is sent again whole.
    @Test func anUploadAProxyChangedIsRefusedAndSentAgainWhole() async throws {
        try await withWorld { world in
            let flipper = UploadFlipper()
            let phone = try world.replica("phone", transport: flipper)
            let bytes = Self.photo(100_000, seed: 12)
            let reference = try await attach(bytes, to: phone, in: world.dir)
            try await phone.put(id: "n1", json: #"{"photo":\#(reference)}"#)
            await phone.sync(ignoringBackoff: true)
            #expect(await phone.lastPushReport.refused.isEmpty, "the write was refused for a byte a proxy changed")
            // A push cut by a loaded machine's timeout stays queued, as on a phone: sync again.
            for _ in 0..<3 where try await !phone.pendingWrites().isEmpty { await phone.sync(ignoringBackoff: true) }
            #expect(try await phone.pendingWrites().isEmpty)
            #expect(flipper.patchBytes == 200_000, "not sent again whole: \(flipper.patchBytes) bytes")
            let held = try SQLiteCollectionStore(path: world.dir.file("s.sqlite"), readOnly: true)
            var stored: [UInt8] = []
            try await held.readAttachment(reference.sha256, range: 0..<100_000) { stored += $0 }
            #expect(stored == bytes)
        }
    }

    /// The cache keeps at most its limit of downloaded files, the least recently used going
    /// first; a file waiting for upload is never evicted.
    @Test func theCacheLimitEvictsDownloadsButNeverAFileWaitingForUpload() async throws {
        try await withWorld { world in
            let phone = try world.replica("phone")
            let (a, b) = (try await attach(Self.photo(100_000, seed: 13), to: phone, in: world.dir, name: "a.jpg"),
                          try await attach(Self.photo(100_000, seed: 14), to: phone, in: world.dir, name: "b.jpg"))
            try await phone.put(id: "n1", json: #"{"photos":[\#(a),\#(b)]}"#)
            await phone.sync(ignoringBackoff: true)

            let tablet = try world.replica("tablet")
            await tablet.setAttachmentCacheLimit(150_000)
            await tablet.sync(ignoringBackoff: true)
            #expect(await tablet.lastAttachmentReport.downloaded == 2)
            #expect(try await tablet.attachmentStatuses().map(\.state).sorted() == ["cached", "remote"], "the cache went over its limit")
            // Waiting for upload: kept whatever the limit.
            let local = try await attach(Self.photo(300_000, seed: 15), to: tablet, in: world.dir, name: "c.jpg")
            try await tablet.put(id: "n2", json: #"{"photo":\#(local)}"#)
            await tablet.setAttachmentCacheLimit(1)
            #expect(try await tablet.attachmentStatuses().first { $0.sha256 == local.sha256 }?.state == "pending-upload")
            #expect(try await tablet.attachment(local).path.hasSuffix(local.sha256))
        }
    }
}

/// A transport whose first `PATCH` body has one byte flipped (a bad proxy); counts the bytes
/// of every `PATCH`.
final class UploadFlipper: SyncTransport, @unchecked Sendable {
    private let real = URLSessionTransport()
    private let lock = NSLock()
    private var flipped = false
    private var sent = 0

    var patchBytes: Int { lock.withLock { sent } }

    func fetch(_ request: SyncRequest) async throws -> SyncResponse {
        var request = request
        if request.method == "PATCH", var body = request.body {
            let flip = lock.withLock { () -> Bool in
                sent += body.count
                defer { flipped = true }
                return !flipped && !body.isEmpty
            }
            if flip {
                body[body.count / 2] ^= 0x01
                request.body = body
            }
        }
        return try await real.fetch(request)
    }
}
