import Foundation

extension TestServer {
    /// The tests' one server fixture: a fresh SQLite store (`s.sqlite`) in a temporary
    /// directory, `seed` run on its path first, a server started on it by `start` (the
    /// defaults, or any of ``start(database:writeToken:maximumWriteBodyBytes:fullBodyCacheMaximumRecords:access:logNotModified:logger:compaction:port:signingKeys:indexMaxAge:readDatabase:changePollInterval:forkCollections:partitionHeadCapacity:maximumWaiters:waitDebounce:indexLifetime:pagingBudgetBytes:maximumAttachmentBytes:console:connections:)``'s
    /// options), then `body` with the server and the store's path — the server stopped and
    /// the directory removed after it, also when `body` throws.
    ///
    /// ```swift
    /// try await TestServer.with(seed: { try Fixtures.importText(Fixtures.ndjson(0..<50), into: try SQLiteDatabase(path: $0), collection: "items") }) { server, db in
    ///     #expect(try await offPool { try server.connect().request("GET", "/v1/collections/items") }.status == 200)
    /// }
    /// ```
    package static func with<T>(
        seed: (String) throws -> Void = { _ in },
        start: (String) async throws -> TestServer = { try await TestServer.start(database: $0) },
        _ body: (TestServer, String) async throws -> T
    ) async throws -> T {
        try await withDirectory(seed: seed, start: start) { server, dir in try await body(server, dir.file("s.sqlite")) }
    }

    /// ``with(seed:start:_:)`` for a test that keeps files of its own beside the store —
    /// replicas, bundles, a CLI's output (a client test's "world"): `body` gets the directory,
    /// the store being `dir.file("s.sqlite")`; everything in it is removed after `body`.
    ///
    /// ```swift
    /// try await TestServer.withDirectory(seed: { … }) { server, dir in
    ///     let phone = try DeltaSnapReplica(path: dir.file("phone.sqlite"), collection: "notes", url: …)
    /// }
    /// ```
    package static func withDirectory<T>(
        seed: (String) throws -> Void = { _ in },
        start: (String) async throws -> TestServer = { try await TestServer.start(database: $0) },
        _ body: (TestServer, TemporaryDirectory) async throws -> T
    ) async throws -> T {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try seed(db)
        let server = try await start(db)
        return try await server.stopping { try await body(server, dir) }
    }
}

extension TestServer {
    /// ``with(seed:start:_:)`` on a store of `backend` (SQLite, or a PostgreSQL cluster of its
    /// own): `seed` writes the fixture's records through the store, `start` gets its URL.
    ///
    /// ```swift
    /// try await TestServer.with(.postgres, seed: { try await $0.importText(#"{"id":"n1"}"#, collection: "notes") }) { server, database in … }
    /// ```
    package static func with<T>(
        _ backend: TestBackend, seed: (TestDatabase) async throws -> Void = { _ in },
        start: (String) async throws -> TestServer = { try await TestServer.start(database: $0) },
        _ body: (TestServer, TestDatabase) async throws -> T
    ) async throws -> T {
        try await TestDatabase.with(backend) { database in
            try await seed(database)
            let server = try await start(database.url)
            return try await server.stopping { try await body(server, database) }
        }
    }
}
