import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// PROTOCOL §8.1: an index document states one state of the store — the collections one
/// commit changed appear together at that commit or together before it, never one of each —
/// and a client polling the index never sees it go back (guarantee 2). Issue 45 points 9 and
/// 9b: a body read installed its collection's head alone, so the index listed `items` and
/// `side` at versions that never coexisted; and of two documents built at once, the one
/// built from older heads could be kept last.
@Suite struct IndexSnapshotTests {
    /// One commit over `items` and `side` (as `follow` writes one source transaction over two
    /// tables), by another writer the server has not heard from yet (its change poll slowed
    /// to a minute); then a body of `items` read, which reveals the commit for `items` only.
    @Test(arguments: TestBackend.allCases)
    func anIndexListsTheCollectionsOfOneCommitTogether(_ backend: TestBackend) async throws {
        try await withServer(backend, changePollInterval: .seconds(60)) { database, server in
            let before = try await Self.index(server)
            #expect(before.versions == ["items": 1, "side": 1])
            try await Self.commitBoth(database, value: 2)
            let body = try await offPool { try server.connect().request("GET", "/v1/collections/items") }
            #expect(body.status == 200 && body.text.contains(#""v":2"#))
            let after = try await Self.index(server)
            #expect(after.versions["items"] == after.versions["side"], "the index mixes two commits: \(after.versions)")
            #expect(after.sequence >= before.sequence)
        }
    }

    /// The invariant under load: one writer commits `items` and `side` together as fast as
    /// it can, one client reads `items`' body in a loop (the testers' reproducer), and four
    /// clients poll the index: every document lists the two at the same version, and each
    /// client's documents never go back — neither the sequence nor any version.
    @Test(.timeLimit(.minutes(2)), arguments: TestBackend.allCases)
    func pollersNeverSeeAMixedOrOlderIndexWhileCommitsLand(_ backend: TestBackend) async throws {
        try await withServer(backend, changePollInterval: .milliseconds(20)) { database, server in
            let deadline = ContinuousClock.now + .seconds(2)
            let documents = Locked(0)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    var value = 2
                    while ContinuousClock.now < deadline {
                        try await Self.commitBoth(database, value: value)
                        value += 1
                    }
                }
                group.addTask {
                    try await offPool {
                        let connection = try server.connect()
                        while ContinuousClock.now < deadline { _ = try connection.request("GET", "/v1/collections/items") }
                    }
                }
                for _ in 0..<4 {
                    group.addTask {
                        let seen = try await offPool { () -> [Index] in
                            let connection = try server.connect()
                            var seen: [Index] = []
                            // At least ten each, however slow a loaded machine is (bounded).
                            let cap = deadline + .seconds(30)
                            while (ContinuousClock.now < deadline || seen.count < 10) && ContinuousClock.now < cap {
                                seen.append(try Index(connection.request("GET", "/v1/index")))
                            }
                            return seen
                        }
                        documents.withLock { $0 += seen.count }
                        for document in seen {
                            #expect(document.versions["items"] == document.versions["side"], "a mixed index: \(document.versions)")
                        }
                        for (earlier, later) in zip(seen, seen.dropFirst()) {
                            #expect(later.sequence >= earlier.sequence, "the sequence went back: \(earlier.sequence) → \(later.sequence)")
                            for (name, version) in earlier.versions {
                                #expect(later.versions[name, default: 0] >= version, "\(name) went back: \(version) → \(later.versions[name] ?? 0)")
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(documents.withLock { $0 } >= 40)
        }
    }

    // MARK: - Fixture

    /// What a client reads of one index document.
    struct Index {
        var sequence: UInt64
        var versions: [String: UInt64]

        init(_ response: RawHTTPClient.Response) throws {
            try #require(response.status == 200, "\(response.status): \(response.text.prefix(200))")
            let index = try SignedIndex.parse(response.body)
            sequence = index.sequence
            versions = Dictionary(index.entries.map { ($0.collection, $0.version) }, uniquingKeysWith: { $1 })
        }
    }

    static func index(_ server: TestServer) async throws -> Index {
        try await offPool { try Index(server.connect().request("GET", "/v1/index")) }
    }

    /// One transaction writing record `r` of both collections at `value`.
    static func commitBoth(_ database: TestDatabase, value: Int) async throws {
        let partitions = try ["items", "side"].map { name in
            PartitionRecords(path: name, records: [try Record(json: Array(#"{"id":"r","v":\#(value)}"#.utf8))])
        }
        _ = try await database.store.importTransactions([StoreTransaction(partitions: partitions, position: nil)])
    }

    /// `items` and `side`, one commit each, served by a server with a signing key.
    func withServer(
        _ backend: TestBackend, changePollInterval: Duration, _ body: (TestDatabase, TestServer) async throws -> Void
    ) async throws {
        try await TestServer.with(
            backend, seed: { database in for name in ["items", "side"] { _ = try await database.importText(#"{"id":"r","v":1}"#, collection: name) } },
            start: { try await TestServer.start(database: $0, signingKeys: [IndexSigningKey.generate()], changePollInterval: changePollInterval) }
        ) { server, database in try await body(database, server) }
    }
}
