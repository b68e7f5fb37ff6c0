import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// Metered networks (issue 21): under a byte budget a sync still polls and takes small
/// deltas, but postpones a larger update — nothing downloaded, nothing changed — until a
/// budget allows it. A real server on 127.0.0.1, URLSession, a real replica file.
@Suite struct NetworkBudgetTests {
    struct World {
        let dir: TemporaryDirectory
        let store: SQLiteDatabase
        let server: TestServer
        var url: URL { URL(string: "\(server.baseURL)/v1/collections/items")! }

        func replica(_ trustedKeys: [TrustedKey] = []) throws -> DeltaSnapReplica {
            try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: url, timeout: .seconds(10), trustedKeys: trustedKeys)
        }
    }

    func withWorld(signingKeys: [IndexSigningKey] = [], _ body: (World) async throws -> Void) async throws {
        try await TestServer.withDirectory(
            seed: { try Fixtures.importText(Fixtures.ndjson(0..<2_000), into: try SQLiteDatabase(path: $0), collection: "items") },
            start: { try await TestServer.start(database: $0, signingKeys: signingKeys) }
        ) { server, dir in
            try await body(World(dir: dir, store: try SQLiteDatabase(path: dir.file("s.sqlite")), server: server))
        }
    }

    /// Syncs until the server has seen the import just made (its watcher polls every 20 ms).
    func syncPastTheImport(_ replica: DeltaSnapReplica) async -> SyncOutcome {
        for _ in 0..<250 {
            let outcome = await replica.sync(ignoringBackoff: true)
            if outcome != .notModified { return outcome }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return .notModified
    }

    @Test func aDeltaOverTheBudgetIsPostponedAndFetchedOnceTheBudgetAllows() async throws {
        try await withWorld { world in
            let replica = try world.replica()
            #expect(await replica.sync().name == "full")
            let held = await replica.token

            // Unchanged: a 304 costs nothing, whatever the budget.
            await replica.setNetworkBudget(.metered(maximumBodyBytes: 0))
            #expect(await replica.sync() == .notModified)

            // One record changed: a small delta fits a small budget.
            try Fixtures.importText(Fixtures.ndjson(0..<1, revision: 1), into: world.store, collection: "items")
            await replica.setNetworkBudget(.metered(maximumBodyBytes: 4_096))
            #expect(await syncPastTheImport(replica).name == "delta")
            let afterSmall = try #require(await replica.token)
            #expect(afterSmall != held)

            // 600 records changed: the delta is over the budget — postponed, nothing changed.
            try Fixtures.importText(Fixtures.ndjson(0..<600, revision: 2), into: world.store, collection: "items")
            let outcome = await syncPastTheImport(replica)
            guard case .postponed(let announced, let budget) = outcome else { Issue.record("expected postponed, got \(outcome)"); return }
            #expect(budget == 4_096 && (announced ?? 0) > 4_096, "\(String(describing: announced))")  // the delta's Content-Length
            #expect(await replica.token == afterSmall)
            #expect(await replica.lastSyncBytesReceived == 0)
            #expect(await replica.status == .updatePostponed)
            #expect(try await replica.verify())
            #expect(await replica.lastFailureKind == nil)

            // Back on an unmetered network: the next sync fetches it (no backoff was set).
            await replica.setNetworkBudget(.unlimited)
            #expect(await replica.sync().name == "delta")
            #expect(await replica.token == (try world.store.head(of: "items"))?.token.description)
            #expect(await replica.status == .synced)
            #expect(try await replica.verify())
        }
    }

    @Test func aSignedSyncPostponesTooAndStillVerifiesTheIndex() async throws {
        let key = IndexSigningKey.generate()
        try await withWorld(signingKeys: [key]) { world in
            let replica = try world.replica([key.publicKey])
            #expect(await replica.sync().name == "full")
            try Fixtures.importText(Fixtures.ndjson(0..<600, revision: 1), into: world.store, collection: "items")
            await replica.setNetworkBudget(.metered(maximumBodyBytes: 1_000))
            let outcome = await syncPastTheImport(replica)
            guard case .postponed = outcome else { Issue.record("expected postponed, got \(outcome)"); return }
            await replica.setNetworkBudget(.unlimited)
            #expect(await replica.sync().name == "delta")
            #expect(try await replica.verify())
        }
    }

    /// `pull --max-bytes`: the line says postponed, exit 4; without it the update comes.
    @Test func theCommandPostponesOverMaxBytesWithExitFour() async throws {
        try await withWorld { world in
            let watcher = try world.replica()
            _ = await watcher.sync()
            let path = world.dir.file("cli.sqlite")
            let url = world.url.absoluteString
            func run(_ arguments: [String]) async throws -> CLI.Result { try await offPool { try CLI.runBlocking(arguments) } }
            #expect(try await run(["pull", "--url", url, "--replica", path, "--max-bytes", "1000"]).status == 4)  // a full body: nothing held
            #expect(try await run(["pull", "--url", url, "--replica", path]).status == 0)
            try Fixtures.importText(Fixtures.ndjson(0..<600, revision: 1), into: world.store, collection: "items")
            _ = await syncPastTheImport(watcher)  // the server has seen the import
            let postponed = try await run(["pull", "--url", url, "--replica", path, "--max-bytes", "1000"])
            #expect(postponed.status == 4 && postponed.stdout.hasPrefix("postponed token=") && postponed.stdout.contains(" budget=1000"), "\(postponed.stdout)\(postponed.stderr)")
            let fetched = try await run(["sync", "--url", url, "--replica", path])
            #expect(fetched.status == 0 && fetched.stdout.hasPrefix("pulled: delta "), "\(fetched.stdout)\(fetched.stderr)")
            #expect(try await run(["pull", "--url", url, "--replica", path, "--max-bytes", "-1"]).status == 2)
        }
    }
}
