import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `deltasnap serve` as a child process on 127.0.0.1 and an ephemeral port, stopped by PID.
///
/// ```swift
/// let server = try ServeProcess.start(["--db", db, "--jwt-secret", "s"])
/// defer { server.stop() }
/// ```
package final class ServeProcess: Sendable {
    package let port: Int
    /// The lines it printed on standard output until every awaited one had come.
    package let lines: [String]
    private let process: Spawned

    package var collectionsURL: String { "http://127.0.0.1:\(port)/v1/collections" }

    private init(port: Int, lines: [String], process: Spawned) {
        self.port = port
        self.lines = lines
        self.process = process
    }

    /// Starts `deltasnap serve --port 0 ARGUMENTS` and waits for its "serving" line (and for a
    /// line starting with each of `awaiting`).
    /// `launcher` runs it through another program (`["/usr/bin/prlimit", "--nofile=512:512"]`).
    package static func start(_ arguments: [String], awaiting: [String] = [], launcher: [String] = []) async throws -> ServeProcess {
        try await offPool { try start(arguments, awaiting: awaiting, launcher: launcher) }
    }

    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package static func start(_ arguments: [String], awaiting: [String] = [], launcher: [String] = []) throws -> ServeProcess {
        let command = launcher + [CLI.binary, "serve", "--port", "0", "--log-level", "warning"] + arguments
        let process = try Spawned(command[0], Array(command.dropFirst()), stdout: .pipe, stderr: .discard)
        let serving = "deltasnap: serving "
        let lines = process.readLines(untilEachOf: awaiting + [serving])
        guard let line = lines.first(where: { $0.hasPrefix(serving) }), let range = line.range(of: "http://127.0.0.1:"),
              let port = Int(line[range.upperBound...].prefix { $0.isNumber })
        else {
            process.signal(SIGKILL)
            process.wait()
            throw RawHTTPClient.Failure(description: "deltasnap serve did not start: \(lines.joined(separator: "\n"))")
        }
        return ServeProcess(port: port, lines: lines, process: process)
    }

    /// Whether the process is still running (it did not crash).
    package var isRunning: Bool { process.isRunning }

    /// SIGTERM, then waits for the exit.
    package func stop() {
        process.stop()
    }
}
