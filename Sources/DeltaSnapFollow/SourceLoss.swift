import DeltaSnapCore
import PostgresNIO

/// Ends a follower's work when the source goes away under it.
///
/// Why this exists: PostgresNIO (1.33) writes a query to its channel without a promise. A
/// query sent after the connection closed — the source shut down or restarted between two
/// polls — is dropped with the promise its result waits on, and the `await` never returns:
/// the follower sat with no socket, logging nothing, and a stop signal then never ended it
/// (the task it cancels is parked on that promise). Each connection's close is the event
/// that cannot be lost, so the work is raced against it here.
///
/// ```swift
/// try await SourceLoss.racing([connection, catalog]) { try await follow(on: connection, catalog: catalog) }
/// ```
enum SourceLoss {
    /// `body`'s result; or, once one of `connections` closed under it, a
    /// ``FollowError/source(_:)`` saying the source went away — when `body` then ends (it is
    /// cancelled: whatever it ends with is a consequence) or `grace` has passed without it
    /// ending. Cancelling the caller cancels `body` and passes on what it ends with.
    static func racing<T: Sendable>(
        _ connections: [PostgresConnection], grace: Duration = .seconds(2), _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let waiting = LockedValue<CheckedContinuation<T, any Error>?>(nil)
        let work = LockedValue<Task<Void, Never>?>(nil)
        /// Whether a connection closed under `body`, and whether the caller asked it to stop.
        let ended = LockedValue((sourceClosed: false, stopping: false))
        let gone = FollowError.source("the source closed the connection (it shut down or restarted)")
        @Sendable func finish(_ result: Result<T, any Error>) {
            waiting.withLock { continuation in
                defer { continuation = nil }
                return continuation
            }?.resume(with: result)
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                waiting.withLock { $0 = continuation }
                let task = Task {
                    let result: Result<T, any Error>
                    do { result = .success(try await body()) } catch { result = .failure(error) }
                    let (sourceClosed, stopping) = ended.withLock { $0 }
                    finish(sourceClosed && !stopping ? .failure(gone) : result)
                }
                work.withLock { $0 = task }
                if Task.isCancelled {
                    ended.withLock { $0.stopping = true }
                    task.cancel()
                }
                for connection in connections {
                    connection.closeFuture.whenComplete { _ in
                        ended.withLock { $0.sourceClosed = true }
                        task.cancel()
                        Task {
                            try? await Task.sleep(for: grace)
                            finish(.failure(gone))
                        }
                    }
                }
            }
        } onCancel: {
            ended.withLock { $0.stopping = true }
            work.withLock { $0 }?.cancel()
        }
    }
}
