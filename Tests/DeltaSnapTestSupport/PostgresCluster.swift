import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway PostgreSQL cluster from Debian's packages: `initdb` into a temporary
/// directory, the server on a free loopback port, run as the unprivileged `postgres` user
/// when the tests run as root (PostgreSQL refuses root), stopped by its PID. A test that
/// needs it fails — never skips — when it cannot start.
///
/// ```swift
/// let cluster = try PostgresCluster.start(in: dir.path)
/// defer { cluster.stop() }
/// let store = try await PostgresStore.connect(cluster.url)
/// ```
public final class PostgresCluster: Sendable {
    public let port: Int
    public let directory: String
    /// `postgres://deltasnap@127.0.0.1:PORT/postgres` (trust authentication on loopback).
    public var url: String { "postgres://deltasnap@127.0.0.1:\(port)/postgres" }

    private init(port: Int, directory: String) {
        self.port = port
        self.directory = directory
    }

    /// The newest installed server's `bin` directory.
    static var binDirectory: String? {
        let root = "/usr/lib/postgresql"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let versions = entries.compactMap { Int($0) }.sorted()
        for version in versions.reversed() {
            let bin = "\(root)/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: bin + "/initdb") { return bin }
        }
        return nil
    }

    public static func start(in parent: String) throws -> PostgresCluster {
        guard let bin = binDirectory else {
            throw RawHTTPClient.Failure(description: "PostgreSQL is not installed (.ci/install-deps.sh installs it)")
        }
        let directory = (parent as NSString).appendingPathComponent("pg")
        let data = directory + "/data"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let asRoot = getuid() == 0
        if asRoot {
            chmod(parent, 0o755)
            try run("/bin/chown", ["-R", "postgres:postgres", directory])
        }
        try runAsServerUser(asRoot, "\(bin)/initdb", ["-D", data, "-U", "deltasnap", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        let port = try NginxCache.freeLoopbackPort()
        // The server detaches (pg_ctl); its PID is in postmaster.pid, which stop() signals.
        try runAsServerUser(asRoot, "\(bin)/pg_ctl", [
            "-D", data, "-l", directory + "/server.log", "-w", "-t", "30", "start",
            "-o", "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
        ])
        return PostgresCluster(port: port, directory: directory)
    }

    /// The postmaster's PID, from its lock file.
    public var pid: pid_t? {
        guard let text = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8) else { return nil }
        return text.split(separator: "\n").first.flatMap { pid_t($0) }
    }

    /// Fast shutdown (SIGINT to the postmaster), waiting up to 30 s for it to go.
    public func stop() {
        guard let pid else { return }
        kill(pid, SIGINT)
        for _ in 0..<300 where kill(pid, 0) == 0 { usleep(100_000) }
    }

    private static func runAsServerUser(_ asRoot: Bool, _ tool: String, _ arguments: [String]) throws {
        if asRoot {
            try run("/usr/sbin/runuser", ["-u", "postgres", "--", tool] + arguments)
        } else {
            try run(tool, arguments)
        }
    }

    private static func run(_ tool: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        // A file, not a pipe: the server pg_ctl leaves running inherits the descriptor, and a
        // pipe would never reach its end.
        let outputPath = NSTemporaryDirectory() + "deltasnap-pg-\(UUID().uuidString).log"
        FileManager.default.createFile(atPath: outputPath, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        try? output.close()
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard process.terminationStatus == 0 else {
            throw RawHTTPClient.Failure(description: "\(tool) failed (\(process.terminationStatus)): \(text.suffix(2000))")
        }
    }
}
