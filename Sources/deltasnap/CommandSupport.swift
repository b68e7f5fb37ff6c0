import ArgumentParser
import Foundation

/// Writes one line to standard error.
func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// Runs `body`, turning any error into a one-line message on stderr and exit code 1
/// (ArgumentParser's own usage errors keep its exit code 64).
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
