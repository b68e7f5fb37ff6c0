import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, not Foundation's `Process`: on Linux,
/// `Process.run()` lists `/proc/self/fd` with a struct copy of each `dirent` that reads past
/// glibc's buffer and now and then crashes the whole test process (swift-corelibs-foundation
/// PR #5472, merged after Swift 6.3.1) — it ended a full CI run here, in `CLI.runBlocking`.
/// The CLI tests start the most children, so they start them this way.
///
/// ```swift
/// let child = try Spawned(CLI.binary, ["--help"], environment: [:], stdout: out, stderr: err)
/// let status = child.wait()
/// ```
package final class Spawned: @unchecked Sendable {
    package let pid: pid_t
    private var status: Int32?

    /// Starts `path ARGUMENTS` with exactly `environment`; stdin from the file `stdin` (nil:
    /// /dev/null), stdout and stderr into files (created or truncated).
    package init(_ path: String, _ arguments: [String], environment: [String: String], stdout: String, stderr: String, stdin: String? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdin ?? "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group, as Process does: a signal to the test run is not sent to it.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let code = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        guard code == 0 else { throw RawHTTPClient.Failure(description: "cannot start \(path): \(String(cString: strerror(code)))") }
        self.pid = pid
    }

    /// Whether it has not exited yet (reaps it when it has).
    package var isRunning: Bool {
        guard status == nil else { return false }
        var raw: Int32 = 0
        let reaped = waitpid(pid, &raw, WNOHANG)
        guard reaped == pid else { return reaped == 0 }
        status = raw
        return false
    }

    /// Waits for the exit; its status: the exit code, or 128 + the signal that ended it.
    @discardableResult
    package func wait() -> Int32 {
        while status == nil {
            var raw: Int32 = 0
            let reaped = waitpid(pid, &raw, 0)
            if reaped == pid { status = raw } else if errno != EINTR { status = 0 }
        }
        return Self.exitCode(status!)
    }

    /// Whether a signal ended it (after ``wait()``).
    package var wasKilled: Bool { status.map { $0 & 0x7f != 0 } ?? false }

    /// `waitpid`'s status as a shell says it (WIFEXITED/WEXITSTATUS are macros Swift cannot import).
    static func exitCode(_ raw: Int32) -> Int32 {
        raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }
}
