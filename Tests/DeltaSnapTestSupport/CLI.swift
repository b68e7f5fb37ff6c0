import Foundation

/// Runs the built `deltasnap` executable as a child process, as a user would.
package enum CLI {
    /// The `deltasnap` binary next to the test bundle (`DELTASNAP_BIN` overrides).
    package static var binary: String {
        if let override = ProcessInfo.processInfo.environment["DELTASNAP_BIN"] { return override }
        var directory = Bundle.main.bundleURL
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("deltasnap").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug/deltasnap").path
    }

    package struct Result: Sendable {
        package var status: Int32
        package var stdout: String
        package var stderr: String
        package var stdoutBytes: [UInt8]

        package init(status: Int32, stdout: String, stderr: String, stdoutBytes: [UInt8]) {
            self.status = status
            self.stdout = stdout
            self.stderr = stderr
            self.stdoutBytes = stdoutBytes
        }
    }

    /// Runs `deltasnap ARGUMENTS` to completion, with `environment` added to the test's, on a
    /// thread of its own: waiting for a child on one of the cooperative pool's threads (two on
    /// this machine) stalls every in-process server of every test running meanwhile.
    @discardableResult
    package static func run(_ arguments: [String], environment: [String: String] = [:], stdin: String? = nil) async throws -> Result {
        try await offPool { try runBlocking(arguments, environment: environment, stdin: stdin) }
    }

    /// ``run(_:environment:stdin:)`` on the calling thread (one that may block).
    @discardableResult
    package static func runBlocking(_ arguments: [String], environment: [String: String] = [:], stdin: String? = nil) throws -> Result {
        // Files rather than pipes: a chatty child can never block on a full pipe.
        let scratch = try TemporaryDirectory("cli")
        defer { scratch.remove() }
        if let stdin { _ = FileManager.default.createFile(atPath: scratch.file("in"), contents: Data(stdin.utf8)) }
        let child = try Spawned(
            binary, arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            stdout: .file(scratch.file("out")), stderr: .file(scratch.file("err")), stdin: stdin == nil ? nil : scratch.file("in"))
        let status = child.wait()
        let outData = FileManager.default.contents(atPath: scratch.file("out")) ?? Data()
        let errData = FileManager.default.contents(atPath: scratch.file("err")) ?? Data()
        return Result(
            status: status,
            stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errData, as: UTF8.self),
            stdoutBytes: [UInt8](outData))
    }

    /// Starts `deltasnap ARGUMENTS`, sends SIGKILL after `delay` seconds unless it has
    /// exited (nil: lets it finish); true when it was killed.
    package static func runAndKill(_ arguments: [String], after delay: Double?, environment: [String: String]) async throws -> Bool {
        try await offPool { try runAndKillBlocking(arguments, after: delay, environment: environment) }
    }

    private static func runAndKillBlocking(_ arguments: [String], after delay: Double?, environment: [String: String]) throws -> Bool {
        let child = try Spawned(
            CLI.binary, arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            stdout: .discard, stderr: .discard)
        guard let delay else {
            child.wait()
            return false
        }
        child.wait(atMost: delay)
        return child.wasKilled
    }
}
