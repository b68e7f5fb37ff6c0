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
        let result = try await offPool { () -> (Int32, Int, String, [String]) in
            // Started with a low soft limit on open files, as many systems start a program:
            // serve raises it to the hard one (it keeps small blobs' files open).
            let process = try Spawned(
                "/bin/sh", ["-c", #"ulimit -Sn 256 && exec "$0" serve --db "$1" --port 0 --log-level warning"#, CLI.binary, db],
                stdout: .pipe, stderr: .discard)
            defer { process.killNow() }
            // The one line it prints when listening names the port.
            let line = process.readLines(untilEachOf: ["deltasnap: serving "]).joined(separator: "\n")
            guard let range = line.range(of: "http://127.0.0.1:"),
                  let port = Int(line[range.upperBound...].prefix { $0.isNumber })
            else { return (-1, 0, line, []) }
            let response = try RawHTTPClient(port: port).request("GET", "/v1/collections/items")
            let limits = (try? String(contentsOfFile: "/proc/\(process.pid)/limits", encoding: .utf8)) ?? ""
            let openFiles = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }.map {
                $0.dropFirst("Max open files".count).split(separator: " ").prefix(2).map(String.init)
            } ?? []
            process.signal(SIGTERM)
            return (process.wait(atMost: 30), response.status, line, openFiles)
        }
        #expect(result.1 == 200, "\(result.2)")
        #expect(result.0 == 0, "exit status after SIGTERM")
        #expect(result.3.count == 2 && result.3[0] == result.3[1] && result.3[0] != "256", "open files soft/hard: \(result.3)")
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

    /// Issue 48: a key set that cannot be had at start — a provider that does not answer, a
    /// plain-http URL off loopback, a file that is missing or not a key set — ends `serve` with
    /// exit 1 and one line naming the set and why, before it listens.
    @Test(.timeLimit(.minutes(2)))
    func aKeySetThatCannotBeHadAtStartIsOneLineAndExit1() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        FileManager.default.createFile(atPath: dir.file("garbage.json"), contents: Data(#"{"keys":"no"}"#.utf8))
        // A port nothing listens on: bound, then closed.
        let closed = try await ScriptedServer.start { _, _ in .init() }
        let port = closed.port
        await closed.stop()
        let cases: [(flag: String, value: String, says: String)] = [
            ("--jwks-url", "http://127.0.0.1:\(port)/jwks.json", "cannot be fetched"),
            ("--jwks-url", "http://203.0.113.9/jwks.json", "https://"),
            ("--jwks-file", dir.file("missing.json"), "cannot be read"),
            ("--jwks-file", dir.file("garbage.json"), dir.file("garbage.json")),
        ]
        for (flag, value, says) in cases {
            let result = try await CLI.run(["serve", "--db", dir.file("s.sqlite"), "--port", "0", flag, value])
            let lines = result.stderr.split(separator: "\n")
            #expect(result.status == 1, "\(flag) \(value): exit \(result.status)\n\(result.stderr)")
            #expect(lines.count == 1, "\(flag) \(value): more than one line: \(result.stderr)")
            #expect(lines.last.map { $0.hasPrefix("deltasnap: ") && $0.contains(says) && $0.contains(value) } == true, "\(flag) \(value): \(result.stderr)")
        }
    }
}
