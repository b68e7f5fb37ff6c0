import Foundation
import HeapModule
import NIOConcurrencyHelpers

/// The requests held by `GET /v1/index?wait=` (docs/PROTOCOL.md §11), and the signal that
/// wakes them: any head the server installs — its own commit, or another process's or
/// instance's reported by the watcher.
///
/// A waiter is one closure in a dictionary (a continuation's resumption, or a parked
/// connection's answer): it holds no thread, no task and no database connection. Wakes are debounced: the first change after a quiet period wakes every waiter
/// at once (no added latency), later ones within `debounce` are gathered into one wake at the
/// end of it, so a storm of commits wakes each waiter at most once per interval. Deadlines
/// are kept by one sweep that runs only while someone waits, in a heap, so a sweep costs the
/// waits that ran out, not every wait (18,000 held waits scanned ten times a second took a
/// tenth of a core).
///
/// A waiter reads ``generation`` *before* it builds its answer and waits for a generation
/// past it: a change between the two is never missed (at worst it wakes once for nothing).
final class IndexWaiters: Sendable {
    enum Wake: Sendable, Equatable {
        /// Something changed: build the answer again and compare.
        case changed
        /// The deadline passed with no change.
        case timedOut
        /// The server is shutting down: answer now.
        case closed
        /// ``capacity`` requests wait already (`503`).
        case full
    }

    /// What ``register(after:until:wake:)`` did.
    enum Registration: Sendable, Equatable {
        /// Waiting: `wake` will be called once (unless ``cancel(_:)`` comes first).
        case waiting(id: UInt64)
        /// Not waiting: the answer is already known (`wake` is not called).
        case immediate(Wake)
    }

    private struct Waiter: Sendable {
        var wake: @Sendable (Wake) -> Void
        var deadline: ContinuousClock.Instant
    }

    /// A waiter's deadline in the sweep's heap; a cancelled or woken waiter's entry stays
    /// until it is popped (or the heap is rebuilt), and then finds no waiter.
    private struct Deadline: Comparable, Sendable {
        var at: ContinuousClock.Instant
        var id: UInt64
        static func < (a: Deadline, b: Deadline) -> Bool { (a.at, a.id) < (b.at, b.id) }
    }

    /// Everything the lock guards, as one plain value.
    private struct State: Sendable {
        var generation: UInt64 = 0
        var waiters: [UInt64: Waiter] = [:]
        var deadlines = Heap<Deadline>()
        var nextID: UInt64 = 0
        var lastWake: ContinuousClock.Instant?
        var wakeScheduled = false
        var sweeping = false
        var isClosed = false
    }

    let debounce: Duration
    let capacity: Int
    private let sweepInterval: Duration
    private let state = NIOLockedValueBox(State())

    init(debounce: Duration = .milliseconds(50), capacity: Int = 10_000, sweepInterval: Duration = .milliseconds(100)) {
        self.debounce = debounce
        self.capacity = max(0, capacity)
        self.sweepInterval = sweepInterval
    }

    /// Advances at every wake.
    var generation: UInt64 { state.withLockedValue { $0.generation } }

    /// How many requests wait now.
    var count: Int { state.withLockedValue { $0.waiters.count } }

    /// Something a view may list changed: wake every waiter now, or at the end of the
    /// current debounce interval if a wake happened within it.
    func changed() {
        let now = ContinuousClock.now
        let debounce = debounce
        let delay: Duration? = state.withLockedValue { state in
            guard !state.wakeScheduled, !state.isClosed else { return nil }
            state.wakeScheduled = true
            guard let lastWake = state.lastWake, now - lastWake < debounce else { return .zero }
            return debounce - (now - lastWake)
        }
        guard let delay else { return }
        if delay == .zero { return wakeAll() }
        Task { [self] in
            try? await Task.sleep(for: delay)
            wakeAll()
        }
    }

    /// Waits until a wake past `generation`, `deadline`, or shutdown.
    func wait(after generation: UInt64, until deadline: ContinuousClock.Instant) async -> Wake {
        await withCheckedContinuation { continuation in
            if case .immediate(let wake) = register(after: generation, until: deadline, wake: { continuation.resume(returning: $0) }) {
                continuation.resume(returning: wake)
            }
        }
    }

    /// Calls `wake` once, at a wake past `generation`, at `deadline`, or at shutdown — from
    /// whichever thread notices it: a caller on an event loop hops back itself. No task is
    /// held meanwhile (``FastPathHandler`` parks a request this way).
    func register(after generation: UInt64, until deadline: ContinuousClock.Instant, wake: @escaping @Sendable (Wake) -> Void) -> Registration {
        let capacity = capacity
        let (registration, startSweep): (Registration, Bool) = state.withLockedValue { state in
            if state.isClosed { return (.immediate(.closed), false) }
            if state.generation != generation { return (.immediate(.changed), false) }
            if ContinuousClock.now >= deadline { return (.immediate(.timedOut), false) }
            if state.waiters.count >= capacity { return (.immediate(.full), false) }
            state.nextID += 1
            state.waiters[state.nextID] = Waiter(wake: wake, deadline: deadline)
            state.deadlines.insert(Deadline(at: deadline, id: state.nextID))
            defer { state.sweeping = true }
            return (.waiting(id: state.nextID), !state.sweeping)
        }
        if startSweep { Task { [self] in await sweep() } }
        return registration
    }

    /// Forgets waiter `id` without waking it (its connection closed).
    func cancel(_ id: UInt64) {
        state.withLockedValue { state in
            state.waiters[id] = nil
            // Closed connections leave their entries behind: rebuilt once they are most of it.
            if state.deadlines.count > 2 * state.waiters.count + 1_024 {
                state.deadlines = Heap(state.waiters.map { Deadline(at: $0.value.deadline, id: $0.key) })
            }
        }
    }

    /// Answers every waiter (graceful shutdown) and every later wait at once.
    func close() {
        let woken = state.withLockedValue { state in
            state.isClosed = true
            defer {
                state.waiters.removeAll()
                state.deadlines = Heap()
            }
            return state.waiters.values.map(\.wake)
        }
        for wake in woken { wake(.closed) }
    }

    private func wakeAll() {
        let woken = state.withLockedValue { state in
            state.wakeScheduled = false
            state.lastWake = .now
            state.generation &+= 1
            defer {
                state.waiters.removeAll(keepingCapacity: true)
                state.deadlines = Heap()
            }
            return state.waiters.values.map(\.wake)
        }
        for wake in woken { wake(.changed) }
    }

    /// Times out the waiters whose deadline passed, every ``sweepInterval`` while any wait.
    private func sweep() async {
        while true {
            try? await Task.sleep(for: sweepInterval)
            let now = ContinuousClock.now
            let (expired, goOn) = state.withLockedValue { state in
                var due: [@Sendable (Wake) -> Void] = []
                while let first = state.deadlines.min, first.at <= now {
                    state.deadlines.removeMin()
                    if let waiter = state.waiters.removeValue(forKey: first.id) { due.append(waiter.wake) }
                }
                // Decided under the lock: a waiter that comes after this sweep stopped starts
                // a new one.
                state.sweeping = !state.waiters.isEmpty
                if !state.sweeping { state.deadlines = Heap() }
                return (due, state.sweeping)
            }
            for wake in expired { wake(.timedOut) }
            if !goOn { return }
        }
    }
}
