import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import Foundation
import Testing

/// Guarantee 1 (no missed change) and 2 (monotone tokens) under concurrent writes.
@Suite struct NoMissedChangeTests {
    /// On SQLite one server; on PostgreSQL three instances of one store, with each writer on
    /// its own instance and every poll sent to the next instance in turn (a load balancer
    /// with no affinity): versions gap-free in commit order, no delta missing a change.
    @Test(.timeLimit(.minutes(3)), arguments: TestBackend.allCases)
    func concurrentWritersAndPollersNeverMissAChange(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(backend, in: dir)
        var servers: [TestServer] = []
        do {
            try await database.importText(Fixtures.ndjson(0..<200), collection: "items")
            for _ in 0..<(backend == .postgres ? 3 : 1) { servers.append(try await TestServer.start(database: database.url)) }
            try await writeAndPoll(database, servers)
        } catch {
            // A failure is reported as one, not as a crash: PostgreSQL connections left open
            // when the store is released trap.
            for server in servers { await server.stop() }
            await database.stop()
            throw error
        }
        for server in servers { await server.stop() }
        await database.stop()
    }

    private func writeAndPoll(_ database: TestDatabase, _ servers: [TestServer]) async throws {
        let instances = servers
        // At least 3 s and 40 writes per writer (a loaded machine is slower, not shorter).
        let deadline = Date().addingTimeInterval(3)
        let writersLeft = Locked(4)
        let pollers = (0..<8).map { _ in ProtocolPoller() }
        let auth = ["Authorization": "Bearer \(TestServer.writeToken)"]
        let generator = SyntheticRecords(seed: 9)

        try await withThrowingTaskGroup(of: Void.self) { group in
            // Three writers through the HTTP write API (each on its own instance), one
            // straight into the store (another process's import, as far as a server can tell).
            for writer in 0..<3 {
                group.addTask {
                    try await offPool {
                        var random = SplitMix64(seed: UInt64(writer + 1))
                        let connection = try instances[writer % instances.count].connect()
                        var writes = 0
                        defer { writersLeft.withLock { $0 -= 1 } }
                        while (Date() < deadline || writes < 40) && writes < 150 {
                            let index = Int(random.next() % 260)
                            let id = SyntheticRecords.id(index)
                            let response: RawHTTPClient.Response
                            if random.next() % 4 == 0 {
                                response = try connection.request("DELETE", "/v1/collections/items/records/\(id)", headers: auth)
                            } else {
                                response = try connection.request("PUT", "/v1/collections/items/records/\(id)", headers: auth,
                                                                  body: generator.json(index: index, revision: writes + writer * 10_000))
                            }
                            if response.status != 200 { Issue.record("write answered \(response.status)") }
                            writes += 1
                            Thread.sleep(forTimeInterval: 0.005)
                        }
                    }
                }
            }
            group.addTask {
                var random = SplitMix64(seed: 4)
                var writes = 0
                defer { writersLeft.withLock { $0 -= 1 } }
                while (Date() < deadline || writes < 40) && writes < 150 {
                    let index = Int(random.next() % 260)
                    let line = random.next() % 4 == 0
                        ? #"{"id":"\#(SyntheticRecords.id(index))","hidden":true}"#
                        : String(decoding: generator.json(index: index, revision: writes + 1000), as: UTF8.self)
                    try await database.importText(line, collection: "items")
                    writes += 1
                    try await Task.sleep(for: .milliseconds(5))
                }
            }
            for (number, poller) in pollers.enumerated() {
                group.addTask {
                    try await offPool {
                        var turn = number
                        while Date() < deadline || writersLeft.current > 0 {
                            try poller.sync(try instances[turn % instances.count].connect())
                            turn += 1
                            Thread.sleep(forTimeInterval: 0.01)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }

        let head = try #require(try await database.head(of: "items"))
        for server in servers { try await waitForHead(server, version: head.version) }
        let export = try await database.export("items")
        for (index, poller) in pollers.enumerated() {
            for server in servers { try await offPool { try poller.sync(try server.connect()) } }
            #expect(poller.problems.isEmpty, "poller \(index): \(poller.problems.prefix(5))")
            #expect(poller.token == head.token.description, "poller \(index)")
            #expect(poller.export == export, "poller \(index)")
            #expect(poller.applied.delta > 0, "poller \(index) saw no delta: \(poller.applied)")
        }
        #expect(head.version > 20)
    }
}
