import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Several collections in one client object: one poll of the index, only the changed ones
/// fetched, each apply its own verified transaction.
@Suite struct ReplicaSetTests {
    @Test(arguments: [false, true])
    func onePollFetchesOnlyWhatChanged(signed: Bool) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        for name in ["alpha", "beta", "gamma"] { try Fixtures.importText(Fixtures.ndjson(0..<10), into: store, collection: name) }
        let key = IndexSigningKey.generate()
        let server = try await TestServer.start(database: dir.file("s.sqlite"), signingKeys: [key])
        defer { Task { await server.stop() } }
        let mirror = CompromisedMirror()
        let set = try DeltaSnapReplicaSet(
            directory: dir.file("replicas"), baseURL: URL(string: server.baseURL)!, collections: ["alpha", "beta", "gamma"],
            transport: mirror, trustedKeys: signed ? [key.publicKey] : [])
        let first = await set.pull()
        #expect(first.values.allSatisfy { $0.name == "full" })

        try Fixtures.importText(#"{"id":"b-new"}"#, into: store, collection: "beta")
        try await waitForToken(server, store, collection: "beta")
        mirror.resetPaths()
        let second = await set.pull()
        #expect(second["alpha"] == .notModified && second["gamma"] == .notModified)
        #expect(second["beta"]?.name == "delta")
        #expect(mirror.paths.allSatisfy { $0 == "/v1/index" || $0.contains("/beta") }, "\(mirror.paths)")
        #expect(try await set["beta"]?.record(id: "b-new") != nil)

        // A collection that fails leaves the others applied.
        try Fixtures.importText(#"{"id":"a-new"}"#, into: store, collection: "alpha")
        try Fixtures.importText(#"{"id":"g-new"}"#, into: store, collection: "gamma")
        try await waitForToken(server, store, collection: "alpha")
        try await waitForToken(server, store, collection: "gamma")
        mirror.rewrite = { url, _ in url.path.contains("/gamma") ? Array("not a body".utf8) : nil }
        let third = await set.pull()
        #expect(third["alpha"]?.name == "delta")
        if case .failed = third["gamma"] {} else { Issue.record("gamma should fail: \(String(describing: third["gamma"]))") }
        #expect(try await set["alpha"]?.record(id: "a-new") != nil)
        #expect(try await set["gamma"]?.record(id: "g-new") == nil)
        #expect(await set["gamma"]?.count == 10)
    }
}
