import Foundation

/// A value that several threads share, behind a lock: its holder needs no
/// `@unchecked Sendable` of its own, and every access is a short `withLock`.
///
/// NSLock, not Synchronization's `Mutex`: the package supports macOS 14 and iOS 17, where
/// `Mutex` is not available; and the client links no NIO (`NIOLockedValueBox`, which the
/// server uses, is this type's model).
///
/// ```swift
/// let hits = LockedValue(0)
/// hits.withLock { $0 += 1 }
/// ```
package final class LockedValue<Value> {
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with the value, the lock held: keep it short, and never call out to code
    /// that may take this lock again.
    package func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

// The lock makes every access exclusive; a value that is not Sendable could still leave
// through `withLock`'s result, so only a Sendable value is shared.
extension LockedValue: @unchecked Sendable where Value: Sendable {}
