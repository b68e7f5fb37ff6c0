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

/// A value that is not `Sendable`, handed from one holder to the next where exactly one
/// holder uses it at a time by construction — a pooled connection from its checkout to its
/// checkin, the writer's connection on its serial queue, the change watcher's connection on
/// one poll at a time. The one audited `@unchecked Sendable` for that pattern (the
/// `sending` parameter cannot say it: the value outlives one hand-over); each use says why
/// only one holder touches it.
///
/// ```swift
/// let writer = HandedOver(try SQLiteDatabase(path: path))   // used on the writer queue only
/// try await writes.run { try writer.value.write(records, to: "items") }
/// ```
package struct HandedOver<Value>: @unchecked Sendable {
    package let value: Value

    package init(_ value: Value) {
        self.value = value
    }
}
