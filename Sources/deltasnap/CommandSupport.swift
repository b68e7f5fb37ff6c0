import ArgumentParser
import DeltaSnapClient
import Foundation

/// Writes one line to standard error.
func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// The exit codes every command uses (README "Exit codes"), so a script can tell what to do.
enum Exit {
    /// Something failed that trying again will not mend by itself (a bad file, a refused or
    /// unusable answer, a replica for another collection…).
    static let error = ExitCode(1)
    /// The command line is wrong (an unknown flag, a missing or invalid option).
    static let usage = ExitCode(2)
    /// `sync`: the server refused some writes (rolled back locally and listed); the rest is done.
    static let writesRefused = ExitCode(3)
    /// Not done now, try later: the server could not be reached, answered 408/429/5xx, or a
    /// wait it asked for (`Retry-After`, `Backoff`) is still running. Local data is kept.
    static let unavailable = ExitCode(4)

    /// The code that decides when several apply: an error, then try-later, then refused writes.
    static func combined(_ codes: [ExitCode?]) -> ExitCode? {
        [error, unavailable, writesRefused].first { candidate in codes.contains { $0 == candidate } }
    }
}

/// Runs `body`, turning any error into a one-line message on stderr and exit code 1
/// (usage errors exit 2: see ``DeltaSnapCommand/main()``).
func reportingErrors<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as ExitCode {
        throw error
    } catch {
        printError("deltasnap: \(error)")
        throw ExitCode.failure
    }
}

/// Buffered writes to standard output.
struct StandardOutput {
    func write(_ bytes: [UInt8]) {
        FileHandle.standardOutput.write(Data(bytes))
    }
}

/// Refuses, for a verb given no bundle (`--snapshot`), a replica still read in place from
/// its bundled `.replica`: opening it would start an empty replica in its place, and check
/// writes against no data. One rule for every verb that opens a replica file.
func refuseReadInPlace(_ replica: String, snapshot: String?) throws {
    if snapshot == nil { try BundledReplica.ReadInPlace.check(replica) }
}
