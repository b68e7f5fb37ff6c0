import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTrust
import Foundation
import Logging

/// A real DeltaSnap server on 127.0.0.1 and an ephemeral port, in this process.
package final class TestServer: Sendable {
    package let port: Int
    package let service: DeltaSnapAPI
    private let task: Task<Void, any Error>

    package static let writeToken = "test-write-token"

    package var baseURL: String { "http://127.0.0.1:\(port)" }

    /// `database` is what `--db` takes: an SQLite path or a `postgres://` URL (``StoreLocation``).
    package static func start(
        database: String, writeToken: String? = TestServer.writeToken,
        maximumWriteBodyBytes: Int = 1024 * 1024, fullBodyCacheMaximumRecords: Int = 100_000,
        access: AccessPolicy = AccessPolicy(), logNotModified: Bool = false, logger: Logger? = nil,
        compaction: CompactionSchedule? = nil, port: Int = 0, signingKeys: [IndexSigningKey] = [], indexMaxAge: Int = 30,
        readDatabase: String? = nil, changePollInterval: Duration = .milliseconds(20), forkCollections: Set<String> = [],
        partitionHeadCapacity: Int = 100_000, maximumWaiters: Int = 10_000, waitDebounce: Duration = .milliseconds(50),
        indexLifetime: Int? = nil, pagingBudgetBytes: Int? = nil, maximumAttachmentBytes: UInt64? = nil, console: Bool = false,
        connections: ConnectionLimits? = nil
    ) async throws -> TestServer {
        let logger = logger ?? {
            var quiet = Logger(label: "test-server")
            quiet.logLevel = .warning
            return quiet
        }()
        let store = try await StoreLocation(database, readReplica: readDatabase).open(logger: logger)
        var configuration = DeltaSnapServerConfiguration(
            writeToken: writeToken, maximumWriteBodyBytes: maximumWriteBodyBytes,
            fullBodyCacheMaximumRecords: fullBodyCacheMaximumRecords, changePollInterval: changePollInterval,
            access: access, logNotModified: logNotModified, compaction: compaction, signingKeys: signingKeys, indexMaxAge: indexMaxAge,
            forkCollections: forkCollections)
        configuration.partitionHeadCapacity = partitionHeadCapacity
        configuration.maximumWaiters = maximumWaiters
        configuration.waitDebounce = waitDebounce
        configuration.console = console
        if let connections { configuration.connections = connections }
        // Below `serve`'s 60-second floor, so a test sees a document re-signed within seconds.
        if let indexLifetime { configuration.indexLifetime = indexLifetime }
        if let pagingBudgetBytes { configuration.pagingBudgetBytes = pagingBudgetBytes }
        if let maximumAttachmentBytes { configuration.maximumAttachmentBytes = maximumAttachmentBytes }
        let server = try await DeltaSnapServer(store: store, configuration: configuration, logger: logger)
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let task = Task {
            try await server.run(host: "127.0.0.1", port: port, handleSignals: false) { port in
                continuation.yield(port)
                continuation.finish()
            }
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            task.cancel()
            throw RawHTTPClient.Failure(description: "the test server did not start")
        }
        return TestServer(port: port, service: server.service, task: task)
    }

    private init(port: Int, service: DeltaSnapAPI, task: Task<Void, any Error>) {
        self.port = port
        self.service = service
        self.task = task
    }

    /// Runs `body`, then stops the server — also when `body` throws.
    ///
    /// ```swift
    /// let server = try await TestServer.start(database: db)
    /// try await server.stopping { try await body(server) }
    /// ```
    package func stopping<T>(after body: () async throws -> T) async throws -> T {
        try await finally(body, then: stop)
    }

    /// Stops the server and waits for it to finish.
    package func stop() async {
        task.cancel()
        _ = await task.result
    }

    /// `PUT path` with `json` as the admin (the write token), on its own connection, off the
    /// cooperative pool.
    package func adminPut(_ path: String, _ json: String) async throws -> RawHTTPClient.Response {
        let port = port
        return try await offPool {
            try RawHTTPClient(port: port).request("PUT", path, headers: ["Authorization": "Bearer \(TestServer.writeToken)"], body: Array(json.utf8))
        }
    }

    /// Waits until the server's public index states `floor` for `collection`: a compaction
    /// made by another process reaches the server through its watcher, later than usual on a
    /// loaded machine. Throws after 10 s.
    package func waitForFloor(_ floor: UInt64, of collection: String) async throws {
        let port = port
        try await eventually("the server never stated floor \(floor) of \(collection)") {
            let body = try await offPool { try RawHTTPClient(port: port).request("GET", "/v1/index").body }
            return (try? SignedIndex.parse(body).entry(for: collection))?.floor == floor
        }
    }

    /// `GET /metrics` as the operator (the admin token): the Prometheus text.
    package func metricsText() async throws -> String {
        let port = port
        return try await offPool {
            try RawHTTPClient(port: port).request("GET", "/metrics", headers: ["Authorization": "Bearer \(TestServer.writeToken)"]).text
        }
    }

    /// Waits until the server answers `collection` (or partition) at `token`, as the admin:
    /// another writer's commit reaches it through its watcher, later on a loaded machine.
    /// Throws after 10 s.
    package func waitForToken(_ token: ServerToken?, of collection: String) async throws {
        let port = port
        guard let path = CollectionPath(collection)?.urlPath else { throw RawHTTPClient.Failure(description: "\(collection) is no collection") }
        try await eventually("the server never served \(collection) at \(token.map(String.init(describing:)) ?? "nil")") {
            let etag = try await offPool {
                try RawHTTPClient(port: port).request("HEAD", path, headers: ["Authorization": "Bearer \(TestServer.writeToken)"]).header("ETag")
            }
            return token.map { etag == "\"\($0)\"" } ?? false
        }
    }

    /// A new raw connection to the server.
    package func connect() throws -> RawHTTPClient {
        try RawHTTPClient(port: port)
    }
}
