import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// A bundled `.replica` (from `bake --replica`): deterministic, verified by `inspect`, read
/// in place at first start and copied on the first write — the bundle itself never changes.
@Suite struct BundledReplicaTests {
    func bytes(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }

    @Test func bakingIsDeterministicAndInspectVerifiesIt() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await Fixtures.bakedReplica(in: dir)
        let first = try bytes(dir.file("items.replica"))
        try BundledReplica.bake(snapshot: dir.file("items.snapshot"), collection: "items", to: dir.file("items.replica"))
        #expect(try bytes(dir.file("items.replica")) == first)
        #expect(BundledReplica.isReplica(dir.file("items.replica")) && !BundledReplica.isReplica(dir.file("items.snapshot")))
        let summary = try BundledReplica.inspect(dir.file("items.replica"))
        let head = try #require(try store.head(of: "items"))
        #expect(summary.verified && summary.count == 200 && summary.collection == "items")
        #expect(summary.token == head.token.description && summary.checksum == head.checksum)

        // One changed byte in one record: the stored checksum no longer matches.
        let db = try SQLiteConnection(path: dir.file("items.replica"))
        try db.execute("UPDATE records SET body = CAST(replace(CAST(body AS TEXT), 'r0000007', 'r0000008') AS BLOB) WHERE id = 'r0000007'")
        #expect(try BundledReplica.inspect(dir.file("items.replica")).verified == false)
    }

    @Test func firstStartReadsTheBundleInPlaceAndTheFirstWriteCopiesIt() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await Fixtures.bakedReplica(in: dir)
        let bundle = try bytes(dir.file("items.replica"))
        let server = try await TestServer.start(database: dir.file("s.sqlite"))
        let path = dir.file("app/items.sqlite")
        try FileManager.default.createDirectory(atPath: dir.file("app"), withIntermediateDirectories: true)
        let replica = try DeltaSnapReplica(
            path: path, collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!,
            bundledSnapshot: dir.file("items.replica"))
        // Readable at once, nothing copied yet.
        #expect(try await replica.record(id: "r0000042")?["id"] == .string("r0000042"))
        #expect(await replica.count == 200)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try await replica.verify())

        // A sync is the first write: the bundle is copied, then the delta applied on top.
        try Fixtures.importText(#"{"id":"r0000001","hidden":true}"# + "\n" + #"{"id":"new","v":1}"#, into: store, collection: "items")
        try await waitForToken(server, store)
        guard case .applied(let applied) = await replica.sync() else { Issue.record("no delta"); await server.stop(); return }
        #expect(applied.kind == .delta)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(try await replica.verify())
        #expect(try Fixtures.dumpReplica(path) == Fixtures.export(store, "items"))
        #expect(try bytes(dir.file("items.replica")) == bundle, "the bundle was written to")

        // A restart opens the adopted copy, not the bundle.
        let reopened = try DeltaSnapReplica(
            path: path, collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!,
            bundledSnapshot: dir.file("items.replica"))
        #expect(try await reopened.record(id: "new") != nil)
        #expect(await reopened.count == 200)
        await server.stop()
    }

    @Test func aLocalWriteOnTheBundleCopiesItFirst() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try await Fixtures.bakedReplica(in: dir, count: 20)
        let bundle = try bytes(dir.file("items.replica"))
        let path = dir.file("r.sqlite")
        let replica = try DeltaSnapReplica(
            path: path, collection: "items", url: URL(string: "http://127.0.0.1:9/v1/collections/items")!,
            bundledSnapshot: dir.file("items.replica"), timeout: .seconds(2))
        try await replica.patch(id: "r0000003", json: #"{"note":"offline"}"#)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(try await replica.record(id: "r0000003")?["note"] == .string("offline"))
        #expect(try await replica.pendingWrites().count == 1)
        #expect(try bytes(dir.file("items.replica")) == bundle)
    }

    @Test func anEmptyReplicaFileLoadsTheBundleAndKeepsItsQueuedWrites() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try await Fixtures.bakedReplica(in: dir, count: 30)
        let url = URL(string: "http://127.0.0.1:9/v1/collections/items")!
        // An earlier start created the file but never got data; the app wrote offline.
        let first = try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: url)
        try await first.put(id: "r0000004", json: #"{"note":"offline"}"#)
        let replica = try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: url, bundledSnapshot: dir.file("items.replica"))
        #expect(await replica.serverCount == 30)
        #expect(try await replica.verify())
        // The queued write survives and still wins over the bundle's record.
        #expect(try await replica.pendingWrites().count == 1)
        #expect(try await replica.record(id: "r0000004") == .object([JSONMember("id", .string("r0000004")), JSONMember("note", .string("offline"))]))
        #expect(await replica.count == 30)
    }

    @Test func aBundleOfAnotherCollectionOrWithoutMetadataIsRefused() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try await Fixtures.bakedReplica(in: dir, count: 5)
        let url = URL(string: "http://127.0.0.1:9/v1/collections/other")!
        #expect(throws: BundledReplica.Unusable.self) {
            _ = try DeltaSnapReplica(path: dir.file("other.sqlite"), collection: "other", url: url, bundledSnapshot: dir.file("items.replica"))
        }
        #expect(!FileManager.default.fileExists(atPath: dir.file("other.sqlite")))
        // A replica an app synced is not a bundle: it names no collection.
        let synced = try DeltaSnapReplica(
            path: dir.file("synced.sqlite"), collection: "items", url: URL(string: "http://127.0.0.1:9/v1/collections/items")!,
            bundledSnapshot: dir.file("items.snapshot"))
        #expect(await synced.count == 5)
        #expect(throws: BundledReplica.Unusable.self) { _ = try BundledReplica.inspect(dir.file("synced.sqlite")) }
    }
}

/// Issue 21 item 7: a first sync that changes no data — a `304`, a dead server, a `503`
/// asking to wait — keeps the bundle in place; its bookkeeping lives in `PATH-sync` and
/// joins the copy the first data change makes.
extension BundledReplicaTests {
    @Test func syncsThatChangeNoDataNeverCopyTheBundle() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await Fixtures.bakedReplica(in: dir)
        let server = try await TestServer.start(database: dir.file("s.sqlite"))
        let url = URL(string: "\(server.baseURL)/v1/collections/items")!
        let path = dir.file("items.sqlite")
        func open(_ url: URL) throws -> DeltaSnapReplica {
            try DeltaSnapReplica(path: path, collection: "items", url: url, bundledSnapshot: dir.file("items.replica"), timeout: .seconds(2))
        }
        try await server.stopping {
            // A dead server, then a 304: neither copies the bundle.
            let offline = try open(URL(string: "http://127.0.0.1:9/v1/collections/items")!)
            guard case .failed = await offline.sync() else { Issue.record("a dead server did not fail"); return }
            #expect(!FileManager.default.fileExists(atPath: path))
            let replica = try open(url)
            #expect(await replica.currentState.notBefore != nil)  // the failure's backoff, kept beside the bundle
            let outcome = await replica.sync(ignoringBackoff: true)
            #expect(outcome == .notModified, "\(outcome)")
            #expect(!FileManager.default.fileExists(atPath: path))
            #expect(FileManager.default.fileExists(atPath: SyncBookkeepingPath.of(path)))
            let bound = await replica.currentState.server
            #expect(await replica.status == .synced && bound == url.absoluteString)

            // A restart still reads the bundle in place, with the bookkeeping: bound to this server.
            let restarted = try open(url)
            #expect(await restarted.lastSuccessfulSync != nil)
            #expect(throws: ReplicaBindingError.self) { try open(URL(string: "http://elsewhere.invalid/v1/collections/items")!) }

            // The first change copies the bundle; the bookkeeping moves into the copy.
            try Fixtures.importText(#"{"id":"new","v":1}"#, into: store, collection: "items")
            try await waitForToken(server, store)
            #expect(await restarted.sync().name == "delta")
            #expect(FileManager.default.fileExists(atPath: path) && !FileManager.default.fileExists(atPath: SyncBookkeepingPath.of(path)))
            let adopted = try DeltaSnapReplica(path: path, collection: "items", url: url)
            let adoptedState = await adopted.currentState
            #expect(adoptedState.server == url.absoluteString && adoptedState.lastSuccessfulSync != nil)
            #expect(try Fixtures.dumpReplica(path) == Fixtures.export(store, "items"))
        }
    }

    @Test func bookkeepingOfAnOlderBundleIsDropped() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await Fixtures.bakedReplica(in: dir, count: 20)
        let path = dir.file("items.sqlite")
        let dead = URL(string: "http://127.0.0.1:9/v1/collections/items")!
        let first = try DeltaSnapReplica(path: path, collection: "items", url: dead, bundledSnapshot: dir.file("items.replica"), timeout: .seconds(2))
        _ = await first.sync()
        #expect(await first.lastError != nil)
        // An app update ships a newer bundle: the old bookkeeping (its failure) is not this bundle's.
        try Fixtures.importText(#"{"id":"new","v":1}"#, into: store, collection: "items")
        try await Fixtures.bake(store.path, "items", into: dir.path)
        try BundledReplica.bake(snapshot: dir.file("items.snapshot"), collection: "items", to: dir.file("items.replica"))
        let updated = try DeltaSnapReplica(path: path, collection: "items", url: dead, bundledSnapshot: dir.file("items.replica"), timeout: .seconds(2))
        let updatedCount = await updated.count
        #expect(await updated.lastError == nil && updatedCount == 21)
        #expect(!FileManager.default.fileExists(atPath: SyncBookkeepingPath.of(path)))
    }
}

extension BundledReplicaTests {
    /// Another process made the replica while this one still read the bundle in place (an
    /// extension, `deltasnap local`): the first data change goes on in that file — its queued
    /// write kept — and never replaces it with a fresh copy of the bundle.
    @Test func aReplicaAnotherProcessCreatedMeanwhileIsNeverReplaced() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await Fixtures.bakedReplica(in: dir, count: 50)
        let server = try await TestServer.start(database: dir.file("s.sqlite"))
        try await server.stopping {
            let path = dir.file("items.sqlite")
            let url = URL(string: "\(server.baseURL)/v1/collections/items")!
            let app = try DeltaSnapReplica(
                path: path, collection: "items", url: url, bundledSnapshot: dir.file("items.replica"), accessToken: TestServer.writeToken)
            #expect(await app.sync() == .notModified && !FileManager.default.fileExists(atPath: path))
            try LocalReplica(path: path).insert(id: "from-the-extension", json: #"{"v":1}"#)
            try Fixtures.importText(#"{"id":"new","v":1}"#, into: store, collection: "items")
            try await waitForToken(server, store)
            #expect(await app.sync().name == "delta")
            #expect(try await app.pendingWrites().map(\.id) == ["from-the-extension"])
            #expect(try await app.record(id: "from-the-extension") != nil)
            #expect(try await app.record(id: "new") != nil)
            await app.sync()
            #expect(await app.lastPushReport.accepted == 1)
            #expect(try Fixtures.export(store, "items").contains("from-the-extension"))
            #expect(try Fixtures.dumpReplica(path) == Fixtures.export(store, "items"))
        }
    }
}

/// Where the client keeps a bundled replica's bookkeeping (docs/CLIENT.md).
enum SyncBookkeepingPath {
    static func of(_ path: String) -> String { path + "-sync" }
}
