import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Signed data through a compromised mirror: nothing the data owner did not sign is ever
/// committed, a replayed or expired index changes nothing, and a failed verification costs
/// one full fetch at most, then the last verified state stays.
@Suite struct SignedSyncTests {
    /// A store with 20 records, a server signing with `keys`, and a replica that pins
    /// `trusted` and talks through a mirror, synced once (verified).
    struct Setup: @unchecked Sendable {
        let dir: TemporaryDirectory
        let store: SQLiteDatabase
        let server: TestServer
        let mirror: CompromisedMirror
        let replica: DeltaSnapReplica
        let key: IndexSigningKey

        var url: URL { URL(string: "\(server.baseURL)/v1/collections/items")! }

        static func make(trusted: [TrustedKey]? = nil) async throws -> Setup {
            let dir = try TemporaryDirectory()
            let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
            try Fixtures.importText(Fixtures.ndjson(0..<20), into: store, collection: "items")
            let key = IndexSigningKey.generate()
            let server = try await TestServer.start(database: dir.file("s.sqlite"), signingKeys: [key])
            let mirror = CompromisedMirror()
            let replica = try DeltaSnapReplica(
                path: dir.file("r.sqlite"), collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!,
                transport: mirror, trustedKeys: trusted ?? [key.publicKey])
            return Setup(dir: dir, store: store, server: server, mirror: mirror, replica: replica, key: key)
        }

        func finish() async {
            await server.stop()
            dir.remove()
        }

        /// What the replica holds, byte for byte, with its state.
        func snapshot() async throws -> (dump: String, state: ReplicaState) {
            var out: [UInt8] = []
            try ReplicaDump.dump(path: dir.file("r.sqlite")) { out.append(contentsOf: $0) }
            return (String(decoding: out, as: UTF8.self), await replica.currentState)
        }

        func held() async throws -> [String: [UInt8]] {
            var held: [String: [UInt8]] = [:]
            try await replica.forEachRecord { bytes in
                let record = try Record.parse(Array(bytes))
                held[record.id] = record.bytes
            }
            return held
        }

        func commit(_ text: String) async throws {
            try Fixtures.importText(text, into: store, collection: "items")
            try await waitForToken(server, store)
        }
    }

    @Test func signedPullVerifiesTheDigestAndConverges() async throws {
        let setup = try await Setup.make()
        defer { Task { await setup.finish() } }
        #expect(await setup.replica.sync().name == "full")
        try await setup.commit(#"{"id":"r0000003","hidden":true}"# + "\n" + #"{"id":"new","v":1}"#)
        #expect(await setup.replica.sync().name == "delta")
        let state = await setup.replica.currentState
        let digest = try setup.store.read { try $0.recomputedDigest(of: "items") }
        #expect(state.digest == digest)
        #expect(state.token == (try setup.store.head(of: "items"))?.token.description)
        #expect(try await setup.replica.verify())
        #expect(setup.mirror.paths.contains { $0.contains("/deltas/") })
        // Up to date: the index alone answers.
        setup.mirror.resetPaths()
        #expect(await setup.replica.sync() == .notModified)
        #expect(setup.mirror.paths == ["/v1/index"])
    }

    /// Forged deltas with a correct count and XXH64 checksum: the digest refuses them and
    /// one full fetch (honest here) repairs the replica.
    @Test(arguments: ["inject", "dropTombstone", "changeByte", "otherBase"])
    func aForgedDeltaCostsOneFullFetch(_ attack: String) async throws {
        let setup = try await Setup.make()
        defer { Task { await setup.finish() } }
        _ = await setup.replica.sync()
        let held = try await setup.held()
        try await setup.commit(#"{"id":"r0000005","hidden":true}"# + "\n" + #"{"id":"r0000006","v":"changed"}"#)
        setup.mirror.rewrite = { url, body in
            guard url.path.contains("/deltas/") else { return nil }
            if attack == "otherBase" {
                return Array(String(decoding: body, as: UTF8.self).replacingOccurrences(of: #""base":""#, with: #""base":"x"#).utf8)
            }
            return try? CompromisedMirror.forge(body, held: held) { records in
                switch attack {
                case "inject": records.append(try! Record(json: Array(#"{"id":"evil","payload":"injected"}"#.utf8)))
                case "dropTombstone": records.removeAll { $0.isHidden }
                default:
                    let index = records.firstIndex { !$0.isHidden }!
                    records[index] = try! Record(json: Array(#"{"id":"r0000006","v":"chanGed"}"#.utf8))
                }
            }
        }
        setup.mirror.resetPaths()
        let outcome = await setup.replica.sync()
        guard case .reset = outcome else {
            Issue.record("expected a reset after the forged delta, got \(outcome)")
            return
        }
        #expect(setup.mirror.paths.filter { $0.contains("/snapshots/") }.count == 1)
        #expect(try await setup.replica.record(id: "evil") == nil)
        #expect(try await setup.replica.record(id: "r0000005") == nil)
        #expect(await setup.replica.currentState.digest == (try setup.store.read { try $0.recomputedDigest(of: "items") }))
    }

    /// When the mirror forges the full body too, nothing is committed, one full fetch was
    /// made, and the replica backs off instead of looping.
    @Test func aForgedFullBodyLeavesTheLastVerifiedState() async throws {
        let setup = try await Setup.make()
        defer { Task { await setup.finish() } }
        _ = await setup.replica.sync()
        let before = try await setup.snapshot()
        let held = try await setup.held()
        try await setup.commit(#"{"id":"r0000001","v":"new"}"#)
        setup.mirror.rewrite = { url, body in
            guard !url.path.hasSuffix("/index") else { return nil }
            return try? CompromisedMirror.forge(body, held: held) { records in
                records.append(try! Record(json: Array(#"{"id":"zz-evil"}"#.utf8)))
            }
        }
        setup.mirror.resetPaths()
        let started = Date()
        let outcome = await setup.replica.sync(now: started)
        guard case .failed(_, let retryAfter) = outcome else {
            Issue.record("expected a failure, got \(outcome)")
            return
        }
        #expect(retryAfter != nil)
        #expect(setup.mirror.paths.filter { $0.contains("/snapshots/") }.count == 1)
        let after = try await setup.snapshot()
        #expect(after.dump == before.dump)
        #expect(after.state.token == before.state.token)
        #expect(after.state.digest == before.state.digest)
        // Backing off: an app's next timer tick (a second later) makes no request.
        setup.mirror.resetPaths()
        if case .deferred = await setup.replica.sync(now: started.addingTimeInterval(1)) {} else { Issue.record("expected the next sync to be deferred") }
        #expect(setup.mirror.paths.isEmpty)
    }

    /// A tampered, unsigned or foreign-signed index is refused before any body is fetched.
    @Test(arguments: ["changedField", "untrustedKey", "noSignature", "notJSON"])
    func aBadIndexIsRefusedWithNothingFetched(_ attack: String) async throws {
        let setup = try await Setup.make()
        defer { Task { await setup.finish() } }
        _ = await setup.replica.sync()
        let before = try await setup.snapshot()
        try await setup.commit(#"{"id":"r0000002","v":"moved"}"#)
        let stranger = IndexSigningKey.generate()
        setup.mirror.rewrite = { url, body in
            guard url.path.hasSuffix("/index"), let index = try? SignedIndex.parse(body) else { return nil }
            switch attack {
            case "changedField":
                return Array(String(decoding: body, as: UTF8.self).replacingOccurrences(of: #""count":20"#, with: #""count":21"#).utf8)
            case "untrustedKey":
                return SignedIndex(sequence: index.sequence, issued: index.issued, expires: index.expires, entries: index.entries).signed(with: [stranger]).document
            case "noSignature":
                return SignedIndex(sequence: index.sequence, issued: index.issued, expires: index.expires, entries: index.entries).document
            default:
                return Array("<html>cached error page</html>".utf8)
            }
        }
        setup.mirror.resetPaths()
        let outcome = await setup.replica.sync()
        guard case .failed(let reason, _) = outcome else {
            Issue.record("expected the index to be refused, got \(outcome)")
            return
        }
        #expect(reason.contains("index"))
        #expect(setup.mirror.paths == ["/v1/index"])
        let after = try await setup.snapshot()
        #expect(after.dump == before.dump)
        #expect(after.state.token == before.state.token)
    }

    /// A replayed older index (lower sequence) does not roll the replica back.
    @Test func aReplayedIndexDoesNotRollBack() async throws {
        let setup = try await Setup.make()
        defer { Task { await setup.finish() } }
        _ = await setup.replica.sync()
        let old = try await offPool { try setup.server.connect().request("GET", "/v1/index").body }
        try await untilTheNextSecond()  // the next commit's sequence is a later second
        try await setup.commit(#"{"id":"r0000002","v":"newer"}"#)
        #expect(await setup.replica.sync().name == "delta")
        let before = try await setup.snapshot()
        setup.mirror.rewrite = { url, _ in url.path.hasSuffix("/index") ? old : nil }
        let outcome = await setup.replica.sync()
        guard case .failed(let reason, _) = outcome else {
            Issue.record("expected the replay to be refused, got \(outcome)")
            return
        }
        #expect(reason.contains("replay"))
        let after = try await setup.snapshot()
        #expect(after.dump == before.dump)
        #expect(after.state.token == before.state.token)
        #expect(after.state.indexSequence == before.state.indexSequence)
    }

    /// An index past its expiry (a mirror freezing the client) is refused, and the status
    /// says the data is unverifiably old.
    @Test func anExpiredIndexIsRefusedAndReported() async throws {
        let setup = try await Setup.make()
        defer { Task { await setup.finish() } }
        #expect(await setup.replica.sync().name == "full")
        let now = Date()
        #expect(await setup.replica.status(at: now) == .synced)
        let later = now.addingTimeInterval(2 * 86_400)  // past the default 24 h lifetime
        let outcome = await setup.replica.sync(now: later, ignoringBackoff: true)
        guard case .failed(let reason, _) = outcome else {
            Issue.record("expected the expired index to be refused, got \(outcome)")
            return
        }
        #expect(reason.contains("expired"))
        #expect(await setup.replica.status(at: later) == .unverifiablyOld)
        // Within the tolerated clock skew it is still fine.
        #expect(await setup.replica.sync(now: now.addingTimeInterval(86_400 + 200), ignoringBackoff: true) == .notModified)
    }

    /// Rotation: the server signs with old and new keys while apps trusting either work; an
    /// app that only knows the old key stops verifying once the old key is dropped.
    @Test func keyRotationAcrossAnAppUpdate() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let store = try SQLiteDatabase(path: db)
        try Fixtures.importText(Fixtures.ndjson(0..<5), into: store, collection: "items")
        let old = IndexSigningKey.generate()
        let new = IndexSigningKey.generate()
        func replica(_ name: String, _ keys: [IndexSigningKey], _ server: TestServer) throws -> DeltaSnapReplica {
            try DeltaSnapReplica(
                path: dir.file(name), collection: "items", url: URL(string: "\(server.baseURL)/v1/collections/items")!,
                trustedKeys: keys.map(\.publicKey))
        }
        let both = try await TestServer.start(database: db, signingKeys: [old, new])
        #expect(await (try replica("v1.sqlite", [old], both)).sync().name == "full")
        #expect(await (try replica("v2.sqlite", [new], both)).sync().name == "full")
        await both.stop()
        let newOnly = try await TestServer.start(database: db, signingKeys: [new])
        defer { Task { await newOnly.stop() } }
        try Fixtures.importText(#"{"id":"rotated","v":1}"#, into: store, collection: "items")
        try await waitForToken(newOnly, store)
        #expect(await (try replica("v2.sqlite", [new, old], newOnly)).sync().name == "delta")
        let stale = await (try replica("v1.sqlite", [old], newOnly)).sync()
        guard case .failed(let reason, _) = stale else {
            Issue.record("an app trusting only the dropped key must refuse, got \(stale)")
            return
        }
        #expect(reason.contains("not signed by a trusted key"))
    }

    /// A bundled snapshot ships with its signed index: loaded only when it matches, and its
    /// sequence is the floor for the network's.
    @Test func theBundledSnapshotIsVerifiedAgainstItsIndex() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<30), into: store, collection: "items")
        let key = IndexSigningKey.generate()
        let bundle = dir.file("bundle")
        try await Fixtures.bake(store.path, "items", into: bundle)
        let index = try await SQLiteCollectionStore(path: store.path, readOnly: true).writeSignedIndex("items", keys: [key], into: bundle)
        let snapshot = bundle + "/items.snapshot"
        let url = URL(string: "http://127.0.0.1:9/v1/collections/items")!
        let replica = try DeltaSnapReplica(path: dir.file("a.sqlite"), collection: "items", url: url, bundledSnapshot: snapshot, trustedKeys: [key.publicKey])
        #expect(await replica.currentState.indexSequence == index.sequence)
        #expect(await replica.count == 30)

        // The same snapshot with one record changed (checksum fixed by the forger) is refused.
        let plain = try GzipDecompressor.decompress([UInt8](try Data(contentsOf: URL(fileURLWithPath: snapshot))))
        let forged = try CompromisedMirror.forge(plain, held: [:]) { records in
            records[0] = try! Record(json: Array(#"{"id":"r0000000","evil":true}"#.utf8))
        }
        try Data(GzipCompressor.compress(forged)).write(to: URL(fileURLWithPath: snapshot))
        #expect(throws: (any Error).self) {
            _ = try DeltaSnapReplica(path: dir.file("b.sqlite"), collection: "items", url: url, bundledSnapshot: snapshot, trustedKeys: [key.publicKey])
        }
        // A key the bundle was not signed with refuses it too.
        #expect(throws: TrustError.self) {
            _ = try DeltaSnapReplica(
                path: dir.file("c.sqlite"), collection: "items", url: url, bundledSnapshot: snapshot, trustedKeys: [IndexSigningKey.generate().publicKey])
        }
    }
}
