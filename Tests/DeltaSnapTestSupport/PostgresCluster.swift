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
/// let store = try await PostgresCollectionStore.connect(url: cluster.url)
/// ```
package final class PostgresCluster: @unchecked Sendable {
    package let port: Int
    package let directory: String
    private let process: Spawned
    /// `postgres://deltasnap@127.0.0.1:PORT/postgres` (trust authentication on loopback).
    package var url: String { "postgres://deltasnap@127.0.0.1:\(port)/postgres" }

    private init(port: Int, directory: String, process: Spawned) {
        self.port = port
        self.directory = directory
        self.process = process
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

    /// A new cluster in `parent/pg`, serving on a free loopback port. `settings` are extra
    /// `-c name=value` server settings (e.g. for a replication primary).
    package static func start(in parent: String, name: String = "pg", settings: [String] = []) async throws -> PostgresCluster {
        try await offPool { try start(in: parent, name: name, settings: settings) }
    }

    /// ``start(in:name:settings:)``, blocking the calling thread (initdb takes seconds).
    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package static func start(in parent: String, name: String = "pg", settings: [String] = []) throws -> PostgresCluster {
        guard let bin = binDirectory else {
            throw RawHTTPClient.Failure(description: "PostgreSQL is not installed (.ci/install-deps.sh installs it)")
        }
        let directory = (parent as NSString).appendingPathComponent(name)
        let data = directory + "/data"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let asRoot = getuid() == 0
        if asRoot {
            chmod(parent, 0o755)
            try run("/bin/chown", ["-R", "postgres:postgres", directory])
        }
        try runAsServerUser(asRoot, "\(bin)/initdb", ["-D", data, "-U", "deltasnap", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        return try launch(bin: bin, directory: directory, settings: settings)
    }

    /// A streaming replica of this cluster (`pg_basebackup -R`), started on its own free
    /// port: read-only, replaying what the primary commits.
    package func startReplica(in parent: String, name: String = "replica") async throws -> PostgresCluster {
        try await offPool { try self.startReplica(in: parent, name: name) }
    }

    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package func startReplica(in parent: String, name: String = "replica") throws -> PostgresCluster {
        guard let bin = Self.binDirectory else { throw RawHTTPClient.Failure(description: "PostgreSQL is not installed") }
        let directory = (parent as NSString).appendingPathComponent(name)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let asRoot = getuid() == 0
        if asRoot { try Self.run("/bin/chown", ["-R", "postgres:postgres", directory]) }
        try Self.runAsServerUser(asRoot, "\(bin)/pg_basebackup", [
            "-h", "127.0.0.1", "-p", "\(port)", "-U", "deltasnap", "-D", directory + "/data", "-R", "-X", "stream", "--no-sync",
        ])
        return try Self.launch(bin: bin, directory: directory, settings: ["hot_standby=on"])
    }

    /// Runs one SQL statement with `psql` (e.g. `SELECT pg_wal_replay_pause()` on a replica).
    package func sql(_ statement: String) async throws {
        try await offPool { try self.sql(statement) }
    }

    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package func sql(_ statement: String) throws {
        guard let bin = Self.binDirectory else { throw RawHTTPClient.Failure(description: "PostgreSQL is not installed") }
        try Self.run("\(bin)/psql", ["-h", "127.0.0.1", "-p", "\(port)", "-U", "deltasnap", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qAt", "-c", statement])
    }

    /// Starts the server of an existing data directory (again, after ``stop()``).
    package func restarted(settings: [String] = []) async throws -> PostgresCluster {
        try await offPool { try self.restarted(settings: settings) }
    }

    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package func restarted(settings: [String] = []) throws -> PostgresCluster {
        guard let bin = Self.binDirectory else { throw RawHTTPClient.Failure(description: "PostgreSQL is not installed") }
        return try Self.launch(bin: bin, directory: directory, settings: settings, port: port)
    }

    /// Runs `postgres` in the foreground as a child of the tests, not detached by `pg_ctl`:
    /// its PID is ours to stop, and a failed start shows in its exit.
    static func launch(bin: String, directory: String, settings: [String], port: Int? = nil) throws -> PostgresCluster {
        let port = try port ?? NginxCache.freeLoopbackPort()
        let asRoot = getuid() == 0
        var arguments = [
            "-D", directory + "/data", "-p", "\(port)", "-k", directory, "-c", "listen_addresses=127.0.0.1",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
        ]
        for setting in settings { arguments += ["-c", setting] }
        let command = asRoot ? ["/usr/sbin/runuser", "-u", "postgres", "--", "\(bin)/postgres"] + arguments : ["\(bin)/postgres"] + arguments
        let logPath = directory + "/server.log"
        if !FileManager.default.fileExists(atPath: logPath) { _ = FileManager.default.createFile(atPath: logPath, contents: nil) }
        if asRoot { _ = chmod(logPath, 0o666) }
        // A restart appends to the log: look for readiness only in what this start writes.
        let startOffset = ((try? FileManager.default.attributesOfItem(atPath: logPath))?[.size] as? NSNumber)?.intValue ?? 0
        let process = try Spawned(command[0], Array(command.dropFirst()), stdout: .appending(logPath), stderr: .appending(logPath))
        let cluster = PostgresCluster(port: port, directory: directory, process: process)
        // Ready when it accepts a connection and is past recovery ("ready to accept").
        for _ in 0..<600 {
            let text = String(decoding: ((try? Data(contentsOf: URL(fileURLWithPath: logPath))) ?? Data()).dropFirst(startOffset), as: UTF8.self)
            if text.contains("ready to accept") { return cluster }
            guard process.isRunning else { break }
            usleep(50_000)
        }
        cluster.stop()
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        throw RawHTTPClient.Failure(description: "PostgreSQL did not start: \(text.suffix(2000))")
    }

    /// The postmaster's PID, from its lock file.
    package var pid: pid_t? {
        guard let text = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8) else { return nil }
        return text.split(separator: "\n").first.flatMap { pid_t($0) }
    }

    /// A cluster its test forgot (it threw before ``stop()``) is asked to shut down all the same;
    /// only while this start's process runs (a restart of the same directory is another's).
    deinit {
        if process.isRunning, let pid, kill(pid, 0) == 0 { kill(pid, SIGINT) }
    }

    /// Fast shutdown (SIGINT to the postmaster, found by PID), waiting up to 30 s for it to go.
    package func stop() {
        if let pid, kill(pid, 0) == 0 {
            kill(pid, SIGINT)
            for _ in 0..<300 where kill(pid, 0) == 0 { usleep(100_000) }
        }
        process.stop()
    }

    /// Runs a tool of the server's (`pg_basebackup`, `psql`) as the server's user.
    package static func runAsServerUser(_ asRoot: Bool, _ tool: String, _ arguments: [String]) throws {
        if asRoot {
            try run("/usr/sbin/runuser", ["-u", "postgres", "--", tool] + arguments)
        } else {
            try run(tool, arguments)
        }
    }

    /// Runs `tool` to its end (started with ``Spawned``, not `Process`: see there); throws its
    /// output when it fails.
    static func run(_ tool: String, _ arguments: [String]) throws {
        let scratch = try TemporaryDirectory("pg-tool")
        defer { scratch.remove() }
        let child = try Spawned(tool, arguments, stdout: .file(scratch.file("out")), stderr: .file(scratch.file("err")))
        let status = child.wait()
        guard status == 0 else {
            let output = ["out", "err"].map { String(decoding: FileManager.default.contents(atPath: scratch.file($0)) ?? Data(), as: UTF8.self) }.joined()
            throw RawHTTPClient.Failure(description: "\(tool) failed (\(status)): \(output.suffix(2000))")
        }
    }
}
