import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Hummingbird
import HummingbirdTesting
import HTTPTypes
import NIOCore
import Testing

/// What the routes answer, through Hummingbird's router test framework (`app.test(.router)`):
/// no socket, no connection handlers — for what needs none (errors, methods, `HEAD`). What
/// the connection layers do is tested on a real server on 127.0.0.1.
@Suite struct RouterLevelTests {
    /// DeltaSnap's routes mounted in a host app's router, on a store with 300 records.
    func withRoutes(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try Fixtures.importText(Fixtures.ndjson(0..<300), into: try SQLiteDatabase(path: db), collection: "items")
        let api = try await DeltaSnapAPI(store: try SQLiteCollectionStore(path: db), configuration: DeltaSnapServerConfiguration(writeToken: TestServer.writeToken))
        let router = Router()
        api.addRoutes(to: router)
        do {
            try await Application(router: router).test(.router) { client in try await body(client) }
        } catch {
            await api.shutdown()
            throw error
        }
        await api.shutdown()
    }

    /// A store is chosen, not written: the API serves DeltaSnap's two stores and refuses
    /// (and closes, as it owns it) any other type conforming to `ServableStore`.
    @Test func aStoreOfAnotherKindIsRefusedAndClosed() async throws {
        actor Foreign: ServableStore {
            var closed = false
            func close() async { closed = true }
        }
        let foreign = Foreign()
        await #expect(throws: StoreError.self) { _ = try await DeltaSnapAPI(store: foreign) }
        #expect(await foreign.closed)
    }

    @Test func errorsAreJSONWithACodeAndAMessage() async throws {
        try await withRoutes { client in
            let cases: [(HTTPRequest.Method, String, HTTPResponse.Status, String)] = [
                (.get, "/v1/collections/Bad%20Name", .badRequest, "bad_collection_name"),
                (.get, "/v1/collections/nope", .notFound, "unknown_collection"),
                (.post, "/v1/collections/items", .methodNotAllowed, "method_not_allowed"),
                (.delete, "/v1/collections", .methodNotAllowed, "method_not_allowed"),
                (.options, "/v1/collections/items", .methodNotAllowed, "method_not_allowed"),
                (.trace, "/v1/collections", .methodNotAllowed, "method_not_allowed"),
            ]
            for (method, path, status, code) in cases {
                let response = try await client.execute(uri: path, method: method)
                #expect(response.status == status, "\(method) \(path)")
                #expect(response.headers[.contentType] == "application/json", "\(method) \(path)")
                let json = try JSONReader(bytes: Array(buffer: response.body)).readValue()
                #expect(json["error"] == .string(code), "\(method) \(path)")
                if case .string(let message)? = json["message"] { #expect(!message.isEmpty) } else { Issue.record("no message") }
            }
            let options = try await client.execute(uri: "/v1/collections/items", method: .options)
            #expect(options.headers[.allow] == "GET, HEAD")
        }
    }

    @Test func headAnswersWhereverGetDoes() async throws {
        try await withRoutes { client in
            for path in ["/v1/collections", "/healthz", "/metrics", "/v1/collections/items/records/r0000001/history"] {
                let head = try await client.execute(uri: path, method: .head, headers: [.authorization: "Bearer \(TestServer.writeToken)"])
                #expect(head.status == .ok && head.body.readableBytes == 0, "HEAD \(path)")
            }
            let health = try await client.execute(uri: "/healthz", method: .get)
            #expect(health.status == .ok && String(buffer: health.body) == "{\"status\":\"ok\"}\n")
        }
    }
}
