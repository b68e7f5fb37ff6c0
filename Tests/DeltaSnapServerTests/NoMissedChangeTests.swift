import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import Foundation
import Testing

/// Guarantee 1 (no missed change) and 2 (monotone tokens) under concurrent writes.
@Suite struct NoMissedChangeTests {
    /// A polling client that applies bodies the way the protocol says, and checks as it goes.
    final class Poller: @unchecked Sendable {
        var records: [String: [UInt8]] = [:]
        var token: String?
        var lastVersion: UInt64 = 0
        var applied = (full: 0, delta: 0, notModified: 0)
        var problems: [String] = []

        func sync(_ connection: RawHTTPClient) throws {
            var headers = ["Accept-Encoding": "gzip"]
            if let token { headers["If-None-Match"] = "\"\(token)\"" }
            let response = try connection.request("GET", "/v1/collections/items", headers: headers)
            if response.status == 304 {
                applied.notModified += 1
                return
            }
            guard response.status == 200 else {
                problems.append("status \(response.status)")
                return
            }
            let reader = BodyReader(bytes: try response.decodedBody())
            let header = try reader.readHeader()
            switch header.kind {
            case .full:
                records.removeAll()
                applied.full += 1
            case .delta:
                if header.base != token { problems.append("delta on base \(header.base ?? "nil") while holding \(token ?? "nil")") }
                applied.delta += 1
            }
            var count = 0
            while let record = try reader.nextRecord() {
                count += 1
                if record.isHidden { records[record.id] = nil } else { records[record.id] = record.bytes }
            }
            if count != header.count { problems.append("count \(count) != \(header.count)") }
            var checksum = StateChecksum.empty
            for bytes in records.values { checksum.add(hash: XXH64.hash(bytes)) }
            if checksum != header.checksum { problems.append("checksum mismatch at \(header.token)") }
            if let version = ServerToken(header.token)?.version {
                if version < lastVersion { problems.append("token moved backwards: \(lastVersion) -> \(version)") }
                lastVersion = version
            }
            token = header.token
        }

        var export: String {
            records.keys.sorted { $0.utf8Precedes($1) }.map { String(decoding: records[$0]!, as: UTF8.self) + "\n" }.joined()
        }
    }

    @Test(.timeLimit(.minutes(2)))
    func concurrentWritersAndPollersNeverMissAChange() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try Fixtures.importText(Fixtures.ndjson(0..<200), into: try Store(path: db), collection: "items")
        let server = try await TestServer.start(databasePath: db)
        let deadline = Date().addingTimeInterval(3)
        let pollers = (0..<8).map { _ in Poller() }
        let auth = ["Authorization": "Bearer \(TestServer.writeToken)"]

        try await withThrowingTaskGroup(of: Void.self) { group in
            // Three writers through the HTTP write API, one straight into the store (another
            // process's import, as far as the server can tell).
            for writer in 0..<4 {
                group.addTask {
                    try await offPool {
                        var random = SplitMix64(seed: UInt64(writer + 1))
                        let generator = SyntheticRecords(seed: 9)
                        let store = writer == 3 ? try Store(path: db) : nil
                        let connection = writer == 3 ? nil : try server.connect()
                        var writes = 0
                        while Date() < deadline && writes < 150 {
                            let index = Int(random.next() % 260)
                            let id = SyntheticRecords.id(index)
                            let hide = random.next() % 4 == 0
                            if let store {
                                let line = hide ? #"{"id":"\#(id)","hidden":true}"# : String(decoding: generator.json(index: index, revision: writes + 1000), as: UTF8.self)
                                try Fixtures.importText(line, into: store, collection: "items")
                            } else if hide {
                                _ = try connection!.request("DELETE", "/v1/collections/items/records/\(id)", headers: auth)
                            } else {
                                _ = try connection!.request("PUT", "/v1/collections/items/records/\(id)", headers: auth,
                                                            body: generator.json(index: index, revision: writes + writer * 10_000))
                            }
                            writes += 1
                            Thread.sleep(forTimeInterval: 0.005)
                        }
                    }
                }
            }
            for poller in pollers {
                group.addTask {
                    try await offPool {
                        let connection = try server.connect()
                        while Date() < deadline {
                            try poller.sync(connection)
                            Thread.sleep(forTimeInterval: 0.01)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }

        let store = try Store(path: db)
        let head = try #require(try store.head(of: "items"))
        try await waitForHead(server, version: head.version)
        let export = try Fixtures.export(store, "items")
        for (index, poller) in pollers.enumerated() {
            try await offPool { try poller.sync(try server.connect()) }
            #expect(poller.problems.isEmpty, "poller \(index): \(poller.problems.prefix(5))")
            #expect(poller.token == head.token.description, "poller \(index)")
            #expect(poller.export == export, "poller \(index)")
            #expect(poller.applied.delta > 0, "poller \(index) saw no delta: \(poller.applied)")
        }
        #expect(head.version > 20)
        await server.stop()
    }
}
