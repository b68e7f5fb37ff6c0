import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

@Suite struct WriteAPITests {
    let auth = ["Authorization": "Bearer \(TestServer.writeToken)"]

    func withServer(writeToken: String? = TestServer.writeToken, _ body: @escaping @Sendable (TestServer, String) async throws -> Void) async throws {
        try await TestServer.with(start: { try await TestServer.start(database: $0, writeToken: writeToken, maximumWriteBodyBytes: 64 * 1024) }, body)
    }

    func send(_ server: TestServer, _ method: String, _ path: String, _ headers: [String: String] = [:], _ body: String = "") async throws -> RawHTTPClient.Response {
        try await offPool { try server.connect().request(method, path, headers: headers, body: Array(body.utf8)) }
    }

    func errorCode(_ response: RawHTTPClient.Response) throws -> String? {
        if case .string(let code)? = try JSONReader(bytes: response.body).readValue()["error"] { return code }
        return nil
    }

    @Test func writesNeedTheBearerToken() async throws {
        try await withServer { server, _ in
            let missing = try await send(server, "PUT", "/v1/collections/c/records/a", [:], #"{"x":1}"#)
            #expect(missing.status == 401 && missing.header("WWW-Authenticate") == "Bearer")
            #expect(try errorCode(missing) == "unauthorized")
            let wrong = try await send(server, "PUT", "/v1/collections/c/records/a", ["Authorization": "Bearer nope"], #"{"x":1}"#)
            #expect(wrong.status == 401)
            let basic = try await send(server, "DELETE", "/v1/collections/c/records/a", ["Authorization": "Basic \(TestServer.writeToken)"])
            #expect(basic.status == 401)
        }
        try await withServer(writeToken: nil) { server, _ in
            let disabled = try await send(server, "PUT", "/v1/collections/c/records/a", auth, #"{"x":1}"#)
            #expect(try disabled.status == 403 && errorCode(disabled) == "writes_disabled")
        }
    }

    @Test func putDeleteAndBatchEachCommitOneVersion() async throws {
        try await withServer { server, db in
            let put = try await send(server, "PUT", "/v1/collections/c/records/a%20b", auth, #"{"name":"Ä"}"#)
            #expect(put.status == 200, "\(put.text)")
            let epoch = try #require(try SQLiteDatabase(path: db).head(of: "c")?.epoch)
            #expect(put.text == #"{"collection":"c","committed":true,"hidden":0,"token":"\#(epoch).1","unchanged":0,"upserted":1,"version":1}"# + "\n")
            #expect(put.header("ETag") == "\"\(epoch).1\"")
            // The same record again: no version.
            let again = try await send(server, "PUT", "/v1/collections/c/records/a%20b", auth, #"{"id":"a b","name":"Ä"}"#)
            #expect(again.text.contains(#""committed":false"#) && again.text.contains("\(epoch).1"))

            let batch = try await send(server, "POST", "/v1/collections/c/records", auth, "{\"id\":\"x\"}\n{\"id\":\"y\"}\n{\"id\":\"z\"}\n")
            #expect(batch.text.contains(#""upserted":3"#) && batch.text.contains(#""version":2"#))
            let delete = try await send(server, "DELETE", "/v1/collections/c/records/x", auth)
            #expect(delete.text.contains(#""hidden":1"#) && delete.text.contains(#""version":3"#))
            let replace = try await send(server, "POST", "/v1/collections/c/records?replace=true", auth, #"[{"id":"y"}]"#)
            #expect(replace.text.contains(#""hidden":2"#) && replace.text.contains(#""version":4"#))
            #expect(try Fixtures.export(try SQLiteDatabase(path: db), "c") == "{\"id\":\"y\"}\n")
            // The server's own writes are visible at once: a GET after the answer sees them.
            let get = try await send(server, "GET", "/v1/collections/c")
            #expect(get.header("ETag") == "\"\(epoch).4\"")
        }
    }

    @Test func invalidWritesAre400AndCommitNothing() async throws {
        try await withServer { server, db in
            _ = try await send(server, "PUT", "/v1/collections/c/records/keep", auth, #"{"v":1}"#)
            let cases: [(String, String, String, String)] = [
                ("PUT", "/v1/collections/c/records/a", "{not json", "invalid_json"),
                ("PUT", "/v1/collections/c/records/a", "[1,2]", "invalid_record"),
                ("PUT", "/v1/collections/c/records/a", #"{"id":"b"}"#, "id_mismatch"),
                ("PUT", "/v1/collections/c/records/a", #"{"hidden":"no"}"#, "invalid_record"),
                ("PUT", "/v1/collections/Bad/records/a", #"{}"#, "bad_collection_name"),
                ("POST", "/v1/collections/c/records", "{\"id\":\"ok\"}\n{\"id\":\"ok\"}\n", "invalid_record"),
                ("POST", "/v1/collections/c/records", "{\"id\":\"ok2\"}\n{\"id\":7}\n", "invalid_record"),
                ("GET", "/v1/collections/c/records/a", "", "method_not_allowed"),
                ("POST", "/v1/collections/c/records?replace=true", "", "empty_batch"),
                ("POST", "/v1/collections/c/records?replace=true", " \n", "empty_batch"),
                // Framing that survived but held no record is the same dropped input.
                ("POST", "/v1/collections/c/records?replace=true", "[]", "empty_batch"),
                ("POST", "/v1/collections/c/records?replace=1", " [ ] ", "empty_batch"),
                // SQLite would store "a\u0000b" as "a".
                ("POST", "/v1/collections/c/records", #"{"id":"a\u0000b"}"#, "invalid_record"),
                ("PUT", "/v1/collections/c/records/a%00b", "{}", "invalid_record"),
            ]
            for (method, path, body, code) in cases {
                let response = try await send(server, method, path, auth, body)
                #expect((400...405).contains(response.status), "\(method) \(path) \(body)")
                #expect(try errorCode(response) == code, "\(method) \(path) \(body): \(response.text)")
            }
            let batch = try await send(server, "POST", "/v1/collections/c/records", auth, "{\"id\":\"ok2\"}\n{\"id\":7}\n")
            #expect(batch.text.contains("line 2"))
            // Nothing of the failed batches was committed.
            #expect(try SQLiteDatabase(path: db).head(of: "c")?.version == 1)
            #expect(try Fixtures.export(try SQLiteDatabase(path: db), "c") == "{\"id\":\"keep\",\"v\":1}\n")
        }
    }

    @Test func bodiesOverTheLimitAre413() async throws {
        try await withServer { server, db in
            let big = Fixtures.ndjson(0..<400)  // ~130 KB, over the 64 KiB limit
            let response = try await send(server, "POST", "/v1/collections/c/records", auth, big)
            #expect(try response.status == 413 && errorCode(response) == "body_too_large")
            #expect(try SQLiteDatabase(path: db).head(of: "c") == nil)
        }
    }
}
