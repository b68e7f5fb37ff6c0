import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Offline writes, pushed through a real server on 127.0.0.1 (and a fault proxy where the
/// network misbehaves), with real SQLite replicas.
@Suite struct TwoWaySyncTests {
    /// A store with two notes, its server, and the collection URL.
    struct World {
        let dir: TemporaryDirectory
        let store: SQLiteDatabase
        let server: TestServer

        var url: URL { URL(string: "\(server.baseURL)/v1/collections/notes")! }

        func replica(_ name: String, url: URL? = nil, token: String? = TestServer.writeToken, batch: Int = 500) throws -> DeltaSnapReplica {
            try DeltaSnapReplica(
                path: dir.file("\(name).sqlite"), collection: "notes", url: url ?? self.url,
                retryPolicy: RetryPolicy(initialDelay: 0.01, maximumDelay: 0.05), timeout: .seconds(10), accessToken: token, pushBatchSize: batch)
        }

        func dump(_ name: String) throws -> String {
            var out: [UInt8] = []
            try ReplicaDump.dump(path: dir.file("\(name).sqlite")) { out.append(contentsOf: $0) }
            return String(decoding: out, as: UTF8.self)
        }

        func export() throws -> String { try Fixtures.export(store, "notes") }

        func proxyURL(_ proxy: FaultProxy) -> URL { URL(string: "http://127.0.0.1:\(proxy.port)/v1/collections/notes")! }
    }

    func withWorld(access: AccessPolicy = AccessPolicy(), forkCollections: Set<String> = [], _ body: (World) async throws -> Void) async throws {
        try await TestServer.withDirectory(
            seed: { try Fixtures.importText(#"{"body":"x","id":"n1","title":"a"}"# + "\n" + #"{"id":"n2","title":"b"}"#, into: try SQLiteDatabase(path: $0), collection: "notes") },
            start: { try await TestServer.start(database: $0, access: access, forkCollections: forkCollections) }
        ) { server, dir in
            try await body(World(dir: dir, store: try SQLiteDatabase(path: dir.file("s.sqlite")), server: server))
        }
    }

    /// Syncs until the replica's token is the store's head (the poll picks up commits within 20 ms).
    func settle(_ replica: DeltaSnapReplica, _ world: World) async throws {
        for _ in 0..<50 {
            await replica.sync(ignoringBackoff: true)
            if await replica.token == (try world.store.head(of: "notes"))?.token.description, try await replica.pendingWrites().isEmpty { return }
            try await Task.sleep(for: .milliseconds(30))
        }
        Issue.record("the replica did not settle")
    }

    /// A proxy whose first `count` pushes are answered 503 (not forwarded); all else passes.
    static func proxyFailingFirstPushes(_ count: Int, of world: World) throws -> FaultProxy {
        let pushes = Locked(0)
        return try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
            guard method == "POST" else { return .forward }
            return pushes.withLock { seen in
                seen += 1
                return seen <= count ? .respond(status: 503, body: #"{"error":"unavailable","message":"try later"}"#) : .forward
            }
        }
    }

    func text(_ replica: DeltaSnapReplica, _ id: String) async throws -> String? {
        try await replica.recordBytes(id: id).map { String(decoding: $0, as: UTF8.self) }
    }

    // MARK: - Merge

    @Test(arguments: [false, true])
    func offlineEditsOfDifferentFieldsConvergeInEitherOrder(phoneFirst: Bool) async throws {
        try await withWorld { world in
            let phone = try world.replica("phone")
            let laptop = try world.replica("laptop")
            await phone.sync()
            await laptop.sync()
            try await phone.patch(id: "n1", json: #"{"title":"from phone"}"#)
            try await laptop.patch(id: "n1", json: #"{"body":"from laptop"}"#)
            #expect(try await text(phone, "n1") == #"{"body":"x","id":"n1","title":"from phone"}"#)
            let (first, second) = phoneFirst ? (phone, laptop) : (laptop, phone)
            await first.sync()
            await second.sync()
            try await settle(first, world)
            let merged = #"{"body":"from laptop","id":"n1","title":"from phone"}"#
            #expect(try world.export().contains(merged))
            let phoneValue = try await text(phone, "n1")
            let laptopValue = try await text(laptop, "n1")
            #expect(phoneValue == merged && laptopValue == merged)
            #expect(try world.dump("phone") == world.export() && world.dump("laptop") == world.export())
            let phoneVerifies = try await phone.verify()
            let laptopVerifies = try await laptop.verify()
            #expect(phoneVerifies && laptopVerifies)
        }
    }

    @Test func theLaterPushWinsTheSameFieldAndTheLoserIsInHistory() async throws {
        try await withWorld { world in
            let a = try world.replica("a")
            let b = try world.replica("b")
            await a.sync()
            await b.sync()
            try await a.patch(id: "n1", json: #"{"title":"A"}"#)
            try await b.patch(id: "n1", json: #"{"title":"B"}"#)
            await a.sync()
            await b.sync()
            try await settle(a, world)
            #expect(try await text(a, "n1") == #"{"body":"x","id":"n1","title":"B"}"#)
            let history = try world.store.history(of: "n1", in: "notes")
            #expect(history.first.map { String(decoding: $0.value, as: UTF8.self) } == #"{"body":"x","id":"n1","title":"A"}"#)
        }
    }

    @Test func aPullWhileWritesArePendingNeverOverwritesAPendingField() async throws {
        try await withWorld { world in
            // The first two pushes fail with 503; pulls always go through.
            let proxy = try Self.proxyFailingFirstPushes(2, of: world)
            defer { proxy.stop() }
            let replica = try world.replica("r", url: world.proxyURL(proxy))
            await replica.sync()
            try await replica.patch(id: "n1", json: #"{"title":"mine"}"#)
            // Meanwhile the server changes both fields of n1.
            try Fixtures.importText(#"{"body":"theirs","id":"n1","title":"theirs"}"#, into: world.store, collection: "notes")
            try await Task.sleep(for: .milliseconds(60))
            let outcome = await replica.sync(ignoringBackoff: true)
            #expect(outcome.name == "delta")
            #expect(await replica.lastPushReport.failure != nil)
            #expect(try await text(replica, "n1") == #"{"body":"theirs","id":"n1","title":"mine"}"#)
            #expect(try await replica.verify())  // the server state held is exactly the server's
            #expect(try await replica.pendingWrites().map(\.id) == ["n1"])
            await replica.sync(ignoringBackoff: true)  // second 503
            try await settle(replica, world)
            #expect(try world.dump("r") == world.export())
            #expect(try world.export().contains(#"{"body":"theirs","id":"n1","title":"mine"}"#))
        }
    }

    // MARK: - Refusals and status classes

    @Test func refusedWritesRollBackAndAreReported() async throws {
        let secret = "two-way-sync-secret"
        try await withWorld(access: AccessPolicy(jwtSecret: secret)) { world in
            let writer = try await AccessClaims(subject: "u", expires: Date().addingTimeInterval(600), write: ["notes"], read: []).signed(secret: secret)
            let reader = try await AccessClaims(subject: "v", expires: Date().addingTimeInterval(600), write: ["other"], read: []).signed(secret: secret)
            let first = try world.replica("first", token: writer)
            let second = try world.replica("second", token: writer)
            await first.sync()
            await second.sync()
            try await first.insert(id: "answer", json: #"{"choice":"a"}"#)
            try await second.insert(id: "answer", json: #"{"choice":"b"}"#)
            try await second.patch(id: "n2", json: #"{"title":"kept"}"#)
            await first.sync()
            await second.sync()
            let report = await second.lastPushReport
            #expect(report.accepted == 1)
            #expect(report.refused.map(\.id) == ["answer"] && report.refused.first?.refusal.code == "exists")
            // Rolled back to the server's value at once; the accepted patch stays.
            #expect(try await text(second, "answer") == #"{"choice":"a","id":"answer"}"#)
            #expect(try await text(second, "n2") == #"{"id":"n2","title":"kept"}"#)

            // A token without the right: 403, every write of the batch refused and rolled back.
            let forbidden = try world.replica("forbidden", token: reader)
            await forbidden.sync()
            try await forbidden.put(id: "n1", json: #"{"title":"nope"}"#)
            try await forbidden.delete(id: "n2")
            await forbidden.sync()
            #expect(await forbidden.lastPushReport.refused.map(\.refusal.code) == ["forbidden", "forbidden"])
            #expect(try await forbidden.pendingWrites().isEmpty)
            #expect(try world.dump("forbidden") == world.export())
            // An expired or invalid token is not a refusal of the writes: they stay queued.
            let expired = try world.replica("expired", token: "garbage")
            await expired.sync()
            try await expired.patch(id: "n1", json: #"{"title":"later"}"#)
            await expired.sync(ignoringBackoff: true)
            #expect(await expired.lastPushReport.failure?.contains("401") == true)
            #expect(try await expired.pendingWrites().count == 1)
            await expired.setAccessToken(writer)
            await expired.sync(ignoringBackoff: true)
            #expect(await expired.lastPushReport.accepted == 1)
        }
    }

    @Test func aPullAloneLeavesTheQueueAndAServerThatTakesNoWritesRollsNothingBack() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(#"{"id":"n1","title":"a"}"#, into: store, collection: "notes")
        let server = try await TestServer.start(database: dir.file("s.sqlite"), writeToken: nil)
        let replica = try DeltaSnapReplica(
            path: dir.file("r.sqlite"), collection: "notes", url: URL(string: "\(server.baseURL)/v1/collections/notes")!)
        await replica.pull()
        try await replica.patch(id: "n1", json: #"{"title":"mine"}"#)
        await replica.pull(ignoringBackoff: true)
        #expect(await replica.lastPushReport.batches == 0)
        #expect(try await replica.pendingWrites().count == 1)
        // 403 writes_disabled is the server's setting, not the write's fault: it stays queued.
        await replica.sync(ignoringBackoff: true)
        #expect(await replica.lastPushReport.failure?.contains("403") == true)
        #expect(try await replica.pendingWrites().count == 1)
        #expect(try await replica.record(id: "n1")?["title"] == .string("mine"))
        await server.stop()
    }

    @Test func deletesAnsweredNotFoundOrGoneCountAsDoneAndNoOtherWriteIsLostToA4xxThatIsNotTheServers() async throws {
        try await withWorld { world in
            let answer = Locked((status: 404, body: #"{"error":"not_found","message":"gone"}"#))
            let proxy = try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
                method == "POST" && answer.current.status != 0 ? .respond(status: answer.current.status, body: answer.current.body) : .forward
            }
            defer { proxy.stop() }
            let replica = try world.replica("r", url: world.proxyURL(proxy))
            await replica.sync()
            try await replica.delete(id: "n2")
            try await replica.put(id: "n3", json: "{}")
            await replica.sync(ignoringBackoff: true)
            var report = await replica.lastPushReport
            // The delete is done; the put is kept (a 404 of the push endpoint says nothing about it).
            #expect(report.accepted == 1 && report.refused.isEmpty && report.failure != nil)
            #expect(try await replica.pendingWrites(includeAcknowledged: false).map(\.id) == ["n3"])
            answer.withLock { $0 = (410, "{}") }
            try await replica.delete(id: "n1")
            await replica.sync(ignoringBackoff: true)
            #expect(await replica.lastPushReport.accepted == 1)
            #expect(try await replica.pendingWrites(includeAcknowledged: false).map(\.id) == ["n3"])
            // A proxy's HTML error page is not the server refusing the writes.
            answer.withLock { $0 = (403, "<html>Forbidden by the hotel wifi</html>") }
            await replica.sync(ignoringBackoff: true)
            report = await replica.lastPushReport
            #expect(report.refused.isEmpty && report.failure?.contains("403") == true)
            #expect(try await replica.pendingWrites(includeAcknowledged: false).map(\.id) == ["n3"])
            // Once the real server answers, the put lands.
            answer.withLock { $0 = (0, "") }
            try await settle(replica, world)
            #expect(try world.export().contains(#"{"id":"n3"}"#))
        }
    }

    @Test func aReplicaRestoredFromABackupGetsANewClientIDInsteadOfLosingWrites() async throws {
        try await withWorld { world in
            do {
                let replica = try world.replica("r")
                await replica.sync()
                try await replica.put(id: "a1", json: "{}")
                try await replica.put(id: "a2", json: "{}")
            }
            // The backup is taken with two writes queued; then they are pushed.
            for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: world.dir.file("r.sqlite\(suffix)")) {
                try FileManager.default.copyItem(atPath: world.dir.file("r.sqlite\(suffix)"), toPath: world.dir.file("backup.sqlite\(suffix)"))
            }
            let original = try world.replica("r")
            try await original.put(id: "a3", json: "{}")
            await original.sync()
            #expect(await original.lastPushReport.accepted == 3)
            // The restored copy numbers its next write 3 again: the server has processed 3 for
            // this client id, so the answer cannot be trusted; the replica takes a new id.
            let restored = try world.replica("backup")
            try await restored.put(id: "b3", json: #"{"from":"backup"}"#)
            try await settle(restored, world)
            #expect(await restored.lastPushReport.refused.isEmpty)
            #expect(try world.export().contains(#"{"from":"backup","id":"b3"}"#))
            #expect(try world.dump("backup") == world.export())
        }
    }

    @Test func a503KeepsTheWriteQueuedAndItLandsExactlyOnce() async throws {
        try await withWorld { world in
            let proxy = try Self.proxyFailingFirstPushes(3, of: world)
            defer { proxy.stop() }
            let replica = try world.replica("r", url: world.proxyURL(proxy))
            await replica.sync()
            try await replica.insert(id: "q1", json: #"{"a":1}"#)
            for _ in 0..<3 {
                await replica.sync(ignoringBackoff: true)
                #expect(try await replica.pendingWrites(includeAcknowledged: false).count == 1)
                #expect(await replica.indicator == .amber)
            }
            try await settle(replica, world)
            #expect(await replica.lastPushReport.refused.isEmpty)
            #expect(try world.export().contains(#"{"a":1,"id":"q1"}"#))
            #expect(await replica.indicator == .green)
            // Landed once: one version holds it, and no retry was refused as a duplicate insert.
            #expect(try world.store.head(of: "notes")?.version == 2)
        }
    }

    @Test func quickTogglesEndInTheUsersLastAction() async throws {
        try await withWorld { world in
            let calls = Locked(0)
            let proxy = try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
                guard method == "POST" else { return .forward }
                return calls.withLock { count in
                    count += 1
                    switch count {
                    case 1: return .respond(status: 503, body: "{}")
                    case 2: return .dropResponse
                    default: return .forward
                    }
                }
            }
            defer { proxy.stop() }
            let replica = try world.replica("r", url: world.proxyURL(proxy))
            await replica.sync()
            try await replica.put(id: "fav", json: #"{"on":true}"#)
            await replica.sync(ignoringBackoff: true)  // 503
            try await replica.delete(id: "fav")
            await replica.sync(ignoringBackoff: true)  // applied, answer lost
            try await replica.put(id: "fav", json: #"{"on":true}"#)
            try await replica.delete(id: "fav")
            try await replica.put(id: "fav", json: #"{"on":"again"}"#)
            try await settle(replica, world)
            #expect(try world.export().contains(#"{"id":"fav","on":"again"}"#))
            #expect(try world.dump("r") == world.export())
        }
    }

    // MARK: - Faults

    @Test(.timeLimit(.minutes(2)))
    func everyWriteLandsExactlyOnceThroughAProxyThatDropsEveryOtherResponse() async throws {
        try await withWorld { world in
            // Every other push answer is lost (after the server applied it), and every third pull's.
            let posts = Locked(0)
            let gets = Locked(0)
            let proxy = try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
                let counter = method == "POST" ? posts : gets
                let count = counter.withLock { value in
                    value += 1
                    return value
                }
                return count % (method == "POST" ? 2 : 3) == 0 ? .dropResponse : .forward
            }
            defer { proxy.stop() }
            let replica = try world.replica("r", url: world.proxyURL(proxy), batch: 40)
            await replica.sync(ignoringBackoff: true)
            await replica.sync(ignoringBackoff: true)
            var refused: [RefusedWrite] = []
            for round in 0..<5 {
                // Create-only inserts: a write applied twice would come back refused ("exists").
                for index in 0..<60 { try await replica.insert(id: "w\(round)-\(index)", json: #"{"round":\#(round)}"#) }
                await replica.sync(ignoringBackoff: true)
                refused += await replica.lastPushReport.refused
            }
            for _ in 0..<60 {
                let queued = try await replica.pendingWrites()
                let token = await replica.token
                if queued.isEmpty, token == (try world.store.head(of: "notes"))?.token.description { break }
                await replica.sync(ignoringBackoff: true)
                refused += await replica.lastPushReport.refused
            }
            #expect(refused.isEmpty, "\(refused.prefix(3))")
            #expect(try await replica.pendingWrites().isEmpty)
            #expect(try world.store.head(of: "notes")?.count == 2 + 300)
            #expect(try world.dump("r") == world.export())
            #expect(proxy.counts.dropped > 5)
        }
    }

    @Test func anEditMadeDuringAPushIsPushedAgainWithItsOwnFields() async throws {
        try await withWorld { world in
            let pushesSeen = Locked(0)
            let proxy = try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
                guard method == "POST" else { return .forward }
                pushesSeen.withLock { $0 += 1 }
                return .delay(seconds: 0.5)
            }
            defer { proxy.stop() }
            let replica = try world.replica("r", url: world.proxyURL(proxy))
            await replica.sync()
            try await replica.patch(id: "n1", json: #"{"title":"first"}"#)
            async let syncing = replica.sync(ignoringBackoff: true)
            // The second edit while the first push is on the wire (however slow the machine).
            while pushesSeen.current == 0 { try await Task.sleep(for: .milliseconds(5)) }
            try await replica.patch(id: "n1", json: #"{"body":"second"}"#)
            // Once the first push has landed, someone else retitles the note. The second push
            // must carry only its own field, so it cannot undo that.
            while try world.store.head(of: "notes")?.version != 2 { try await Task.sleep(for: .milliseconds(10)) }
            try Fixtures.importText(#"{"body":"x","id":"n1","title":"server"}"#, into: world.store, collection: "notes")
            _ = await syncing
            #expect(await replica.lastPushReport.accepted == 2)
            #expect(await replica.lastPushReport.batches == 2)
            try await settle(replica, world)
            #expect(try world.export().contains(#"{"body":"second","id":"n1","title":"server"}"#))
            #expect(try world.dump("r") == world.export())
        }
    }

    @Test func anAcceptedWriteStaysVisibleUntilThePullThatBringsIt() async throws {
        try await withWorld { world in
            let failPulls = Locked(false)
            let proxy = try FaultProxy(upstreamPort: world.server.port) { _, method, _ in
                method == "GET" && failPulls.current ? .respond(status: 503, body: "{}") : .forward
            }
            defer { proxy.stop() }
            let replica = try world.replica("r", url: world.proxyURL(proxy))
            await replica.sync()
            try await replica.patch(id: "n1", json: #"{"title":"accepted"}"#)
            failPulls.withLock { $0 = true }
            let outcome = await replica.sync(ignoringBackoff: true)
            #expect(outcome.name == "failed")
            #expect(await replica.lastPushReport.accepted == 1)
            #expect(try await text(replica, "n1") == #"{"body":"x","id":"n1","title":"accepted"}"#)
            #expect(try await replica.pendingWrites().map(\.isAcknowledged) == [true])
            #expect(try await replica.pendingWrites(includeAcknowledged: false).isEmpty)
            // A restarted app still shows it (the acknowledgement is on disk) and never re-sends it.
            let restarted = try world.replica("r", url: world.proxyURL(proxy))
            #expect(try await text(restarted, "n1") == #"{"body":"x","id":"n1","title":"accepted"}"#)
            failPulls.withLock { $0 = false }
            try await settle(restarted, world)
            #expect(await restarted.lastPushReport.batches == 0)
            #expect(try world.dump("r") == world.export())
        }
    }

    // MARK: - Order, lifecycle, status

    @Test func clientClocksSkewedByADayChangeNothing() async throws {
        try await withWorld { world in
            let ahead = try world.replica("ahead")
            let behind = try world.replica("behind")
            let day: TimeInterval = 86_400
            await ahead.sync(now: Date().addingTimeInterval(day), ignoringBackoff: true)
            await behind.sync(now: Date().addingTimeInterval(-day), ignoringBackoff: true)
            try await ahead.patch(id: "n1", json: #"{"title":"ahead"}"#)
            try await behind.patch(id: "n1", json: #"{"title":"behind"}"#)
            // The device whose clock is a day behind pushes last, so it wins: server order decides.
            await ahead.sync(now: Date().addingTimeInterval(day), ignoringBackoff: true)
            await behind.sync(now: Date().addingTimeInterval(-day), ignoringBackoff: true)
            try await settle(ahead, world)
            #expect(try world.export().contains(#"{"body":"x","id":"n1","title":"behind"}"#))
        }
    }

    @Test func createSyncDeleteSyncLeavesTheRecordDeleted() async throws {
        try await withWorld { world in
            let replica = try world.replica("r")
            await replica.sync()
            try await replica.insert(id: "tmp", json: #"{"t":1}"#)
            await replica.sync()
            #expect(try world.export().contains(#""id":"tmp""#))
            try await replica.delete(id: "tmp")
            #expect(try await replica.recordBytes(id: "tmp") == nil)
            await replica.sync()
            try await settle(replica, world)
            #expect(try await replica.recordBytes(id: "tmp") == nil)
            #expect(try !world.export().contains(#""id":"tmp""#))
            #expect(try world.dump("r") == world.export())
        }
    }

    @Test func aQueueLeftByAKilledAppDrainsOnTheNextSyncWithoutANewWrite() async throws {
        try await withWorld { world in
            do {
                let app = try world.replica("r")
                await app.sync()
                try await app.insert(id: "offline-1", json: "{}")
                try await app.insert(id: "offline-2", json: "{}")
            }
            let restarted = try world.replica("r")
            #expect(try await restarted.pendingWrites().map(\.id) == ["offline-1", "offline-2"])
            await restarted.sync()
            #expect(await restarted.lastPushReport.accepted == 2)
            try await settle(restarted, world)
            #expect(try world.dump("r") == world.export())
        }
    }

    @Test func theStatusDotFollowsPendingWritesAndFailures() async throws {
        try await withWorld { world in
            let replica = try world.replica("r")
            #expect(await replica.indicator == .amber)  // never synced
            await replica.sync()
            #expect(await replica.indicator == .green)
            try await replica.patch(id: "n1", json: #"{"title":"t"}"#)
            #expect(await replica.indicator == .amber)
            #expect(try await replica.pendingWrites().map(\.operation) == [.patch])
            await replica.sync()
            try await settle(replica, world)
            #expect(await replica.indicator == .green)

            // Failing since two hours ago (by the sync's clock): red.
            let offline = try world.replica("offline", url: URL(string: "http://127.0.0.1:9/v1/collections/notes")!)
            await offline.sync(now: Date().addingTimeInterval(-2 * 3600), ignoringBackoff: true)
            #expect(await offline.indicator == .red)
            let recent = try world.replica("recent", url: URL(string: "http://127.0.0.1:9/v1/collections/notes")!)
            await recent.sync(ignoringBackoff: true)
            #expect(await recent.indicator == .amber)
        }
    }

    @Test func localWritesThatCanNeverBeAcceptedAreRefusedAtOnce() async throws {
        try await withWorld { world in
            let replica = try world.replica("r")
            await replica.sync()
            await #expect(throws: MutationRefusal.exists("n1")) { try await replica.insert(id: "n1", json: "{}") }
            await #expect(throws: MutationRefusal.notFound("zz")) { try await replica.patch(id: "zz", json: #"{"a":1}"#) }
            await #expect(throws: MutationRefusal.self) { try await replica.put(id: "x", json: "[1]") }
            await #expect(throws: MutationRefusal.self) { try await replica.put(id: "x", json: #"{"hidden":true}"#) }
            await #expect(throws: MutationRefusal.self) { try await replica.put(id: "x", json: #"{"id":"y"}"#) }
            await #expect(throws: JSONParseError.self) { try await replica.put(id: "x", json: "{") }
            #expect(try await replica.pendingWrites().isEmpty)
            // Patch: null removes a field; the server applies the same rule.
            try await replica.patch(id: "n1", json: #"{"body":null,"tags":["a"]}"#)
            #expect(try await text(replica, "n1") == #"{"id":"n1","tags":["a"],"title":"a"}"#)
            #expect(await replica.count == 2)
            #expect(await replica.serverCount == 2)
            try await replica.insert(id: "n9", json: "{}")
            try await replica.delete(id: "n2")
            #expect(await replica.count == 2)
            try await settle(replica, world)
            #expect(try world.dump("r") == world.export())
        }
    }
}
