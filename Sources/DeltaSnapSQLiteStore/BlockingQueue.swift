import DeltaSnapStore
import Dispatch

/// Runs blocking work (SQLite calls: an import of 32 MiB, a write transaction waiting for
/// the file lock) on a dispatch queue of the store's own, so it never occupies one of the
/// few threads of Swift's cooperative pool — two on a 2-core machine, where one blocked
/// import would halve every other request's capacity. GRDB does the same with its
/// `DatabaseQueue`/`DatabasePool` dispatch queues.
///
/// ```swift
/// let writer = BlockingQueue(label: "deltasnap.sqlite.writer")
/// let result = try await writer.run { try store.write(to: "countries") { … } }
/// ```
package struct BlockingQueue: Sendable {
    private let queue: DispatchQueue

    /// A serial queue (one job at a time, in order: a writer), or a concurrent one (readers).
    package init(label: String, concurrent: Bool = false) {
        queue = DispatchQueue(label: label, qos: .userInitiated, attributes: concurrent ? .concurrent : [])
    }

    /// Runs `body` on the queue and resumes the caller with its result.
    package func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}
