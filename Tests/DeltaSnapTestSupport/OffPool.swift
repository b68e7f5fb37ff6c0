import Foundation

/// Runs blocking work (sockets, child processes) on a thread of its own, never on Swift's
/// cooperative pool: with two cores that pool has two threads, and a test blocking them
/// would starve the in-process server it is talking to.
package func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try body() })
        }
        thread.stackSize = 4 << 20
        thread.start()
    }
}
