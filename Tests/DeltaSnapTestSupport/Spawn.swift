import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, not Foundation's `Process`: on Linux,
/// `Process.run()` lists `/proc/self/fd` with a struct copy of each `dirent` that reads past
/// glibc's buffer and now and then crashes the whole test process (swift-corelibs-foundation
/// PR #5472, merged after Swift 6.3.1) — it ended a full CI run here, in `CLI.runBlocking`.
/// Every child the tests start (the CLI, servers, tools) starts this way.
///
/// ```swift
/// let child = try Spawned(CLI.binary, ["--help"], stdout: .file(out), stderr: .discard)
/// let status = child.wait()
/// ```
package final class Spawned: @unchecked Sendable {
    /// Where a child's standard output or error goes.
    package enum Output: Sendable {
        /// A file, created or truncated.
        case file(String)
        /// A file, created or appended to.
        case appending(String)
        /// `/dev/null`.
        case discard
        /// A pipe the test reads through ``Spawned/output`` (standard output only).
        case pipe
    }

    package let pid: pid_t
    /// The read end of the child's standard output when it was ``Output/pipe``.
    package let output: FileHandle?
    private let lock = NSLock()
    /// `waitpid`'s raw status once reaped; guarded by `lock` (the test and a `defer` may ask).
    private var status: Int32?

    /// Starts `path ARGUMENTS` with `environment` (nil: this process's); stdin from the file
    /// `stdin` (nil: /dev/null).
    package init(
        _ path: String, _ arguments: [String], environment: [String: String]? = nil, stdout: Output, stderr: Output, stdin: String? = nil
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdin ?? "/dev/null", O_RDONLY, 0)
        var pipeEnds: [Int32] = [-1, -1]
        if case .pipe = stdout {
            // Both ends close in every child at the closefrom below (the write end after its
            // dup2 to the child's 1), so no other child keeps the pipe open.
            guard pipe(&pipeEnds) == 0 else { throw Self.failure(path, errno) }
            posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
        }
        for (descriptor, output) in [(Int32(1), stdout), (2, stderr)] {
            switch output {
            case .file(let file): posix_spawn_file_actions_addopen(&actions, descriptor, file, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            case .appending(let file): posix_spawn_file_actions_addopen(&actions, descriptor, file, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .discard: posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", O_WRONLY, 0)
            // Standard error is never piped: nobody would read it, and a full pipe stops the child.
            case .pipe where descriptor == 2: posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", O_WRONLY, 0)
            case .pipe: break
            }
        }
        // Nothing else of ours: Process closes every other descriptor in the child, and
        // without that a child (nginx) kept a test server's sockets open — the server's
        // graceful stop then waited for ever on connections its peers never saw closed.
        guard let addCloseFrom = Self.addCloseFrom else {
            for end in pipeEnds where end >= 0 { close(end) }
            throw RawHTTPClient.Failure(description: "cannot start \(path): glibc 2.34 or later is needed (posix_spawn_file_actions_addclosefrom_np)")
        }
        _ = addCloseFrom(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group, as Process does: a signal to the test run is not sent to it.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let code = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        if pipeEnds[1] >= 0 { close(pipeEnds[1]) }
        guard code == 0 else {
            if pipeEnds[0] >= 0 { close(pipeEnds[0]) }
            throw Self.failure(path, code)
        }
        self.pid = pid
        self.output = pipeEnds[0] >= 0 ? FileHandle(fileDescriptor: pipeEnds[0], closeOnDealloc: true) : nil
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+): a GNU extension that
    /// Swift's Glibc module does not import (it is declared under `__USE_GNU`).
    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let addCloseFrom: AddCloseFrom? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np").map {
        unsafeBitCast($0, to: AddCloseFrom.self)
    }

    private static func failure(_ path: String, _ code: Int32) -> RawHTTPClient.Failure {
        RawHTTPClient.Failure(description: "cannot start \(path): \(String(cString: strerror(code)))")
    }

    /// Whether it has not exited yet (reaps it when it has).
    package var isRunning: Bool {
        if lock.withLock({ status != nil }) { return false }
        var raw: Int32 = 0
        let reaped = waitpid(pid, &raw, WNOHANG)
        if reaped == 0 { return true }
        if reaped == pid { lock.withLock { status = raw } }
        // -1 (ECHILD): another caller reaped it.
        return false
    }

    /// Sends `signal` while it runs.
    package func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits for the exit; its status: the exit code, or 128 + the signal that ended it.
    @discardableResult
    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package func wait() -> Int32 {
        while true {
            if let status = lock.withLock({ status }) { return Self.exitCode(status) }
            var raw: Int32 = 0
            let reaped = waitpid(pid, &raw, 0)
            if reaped == pid {
                lock.withLock { status = raw }
            } else if errno == ECHILD {
                // Reaped by another caller, which records the status next.
                usleep(1_000)
            }
        }
    }

    /// Waits at most `seconds` for the exit, then kills it (never a hung test); its status.
    @discardableResult
    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package func wait(atMost seconds: Double) -> Int32 {
        let deadline = Date().addingTimeInterval(seconds)
        while isRunning, Date() < deadline { usleep(2_000) }
        if isRunning { kill(pid, SIGKILL) }
        return wait()
    }

    /// SIGTERM, then waits for the exit (SIGKILL after `seconds`).
    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: call it inside offPool")
    package func stop(within seconds: Double = 30) {
        signal(SIGTERM)
        wait(atMost: seconds)
    }

    /// SIGKILL now and reap it (brief: for a `defer` in an async test, which cannot await).
    package func killNow() {
        signal(SIGKILL)
        _ = waitBriefly()
    }

    /// The blocking ``wait()``, for the async forms once the exit is known or forced (it
    /// returns at once then): called from an async function, `wait()` means its async form.
    private func waitBriefly() -> Int32 { wait() }

    /// ``wait()`` without holding a thread of the cooperative pool: polls every 2 ms.
    @discardableResult
    package func wait() async -> Int32 {
        while isRunning { try? await Task.sleep(for: .milliseconds(2)) }
        return waitBriefly()
    }

    /// ``wait(atMost:)`` without holding a thread of the cooperative pool.
    @discardableResult
    package func wait(atMost seconds: Double) async -> Int32 {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(2)) }
        if isRunning { signal(SIGKILL) }
        return waitBriefly()
    }

    /// Whether a signal ended it (after ``wait()``).
    package var wasKilled: Bool { lock.withLock { status.map { $0 & 0x7f != 0 } ?? false } }

    /// `waitpid`'s status as a shell says it (WIFEXITED/WEXITSTATUS are macros Swift cannot import).
    static func exitCode(_ raw: Int32) -> Int32 {
        raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }

    /// Reads the piped standard output until every line starting with one of `prefixes` has
    /// come (or the output ends); all the lines read.
    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: call it inside offPool")
    package func readLines(untilEachOf prefixes: [String]) -> [String] {
        guard let output else { return [] }
        var text = ""
        var lines: [String] { text.split(separator: "\n").map(String.init) }
        while !prefixes.allSatisfy({ prefix in lines.contains { $0.hasPrefix(prefix) } }) {
            let data = output.availableData
            if data.isEmpty { break }
            text += String(decoding: data, as: UTF8.self)
        }
        return lines
    }
}
