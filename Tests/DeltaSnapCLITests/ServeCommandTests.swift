import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `deltasnap serve` as an operator runs it: a child process, stopped with SIGTERM.
@Suite struct ServeCommandTests {
    @Test(.timeLimit(.minutes(1)))
    func servesOnAnEphemeralPortAndStopsGracefullyOnSIGTERM() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try Fixtures.importText(Fixtures.ndjson(0..<10), into: try SQLiteDatabase(path: db), collection: "items")
        let result = try await offPool { () -> (Int32, Int, String) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: CLI.binary)
            process.arguments = ["serve", "--db", db, "--port", "0", "--log-level", "warning"]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            // The one line it prints when listening names the port.
            var line = ""
            while !line.contains("\n") {
                let data = output.fileHandleForReading.availableData
                if data.isEmpty { break }
                line += String(decoding: data, as: UTF8.self)
            }
            guard let range = line.range(of: "http://127.0.0.1:"),
                  let port = Int(line[range.upperBound...].prefix { $0.isNumber })
            else { return (-1, 0, line) }
            let response = try RawHTTPClient(port: port).request("GET", "/v1/collections/items")
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
            return (process.terminationStatus, response.status, line)
        }
        #expect(result.1 == 200, "\(result.2)")
        #expect(result.0 == 0, "exit status after SIGTERM")
    }

    /// docs/PROTOCOL.md §8.1: an index lifetime under 60 seconds is refused at start, as a
    /// usage error (exit 2) that says the limit.
    @Test func anIndexLifetimeUnderAMinuteIsAUsageError() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let short = try await offPool { try CLI.runBlocking(["serve", "--db", dir.file("s.sqlite"), "--port", "0", "--index-lifetime", "59"]) }
        #expect(short.status == 2 && short.stderr.contains("at least 60 seconds"), "\(short.stderr)")
    }

    @Test func aBusyPortIsAOneLineError() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try await ScriptedServer.start { _, _ in .init() }
        let result = try await offPool { try CLI.runBlocking(["serve", "--db", dir.file("s.sqlite"), "--port", String(server.port)]) }
        await server.stop()
        #expect(result.status == 1)
        #expect(result.stderr.split(separator: "\n").last?.hasPrefix("deltasnap: ") == true, "\(result.stderr)")
    }
}
