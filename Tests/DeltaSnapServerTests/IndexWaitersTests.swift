@testable import DeltaSnapServer
import DeltaSnapTestSupport
import Foundation
import Testing

/// The debounce of ``IndexWaiters``: a storm of changes wakes a waiter a bounded number of
/// times, the first change of a quiet period at once.
@Suite struct IndexWaitersTests {
    /// A second of changes every half millisecond: the waiter is woken at once by the first,
    /// then at most once per 50 ms — bounded by how long the storm lasted, not by how many
    /// changes it made (a loaded machine makes fewer, and slower).
    @Test func aStormOfChangesWakesAWaiterAtMostOncePerInterval() async throws {
        let waiters = IndexWaiters(debounce: .milliseconds(50), capacity: 10)
        let wakes = Locked(0)
        let stormOver = Locked(false)
        let seen = Locked(waiters.generation)
        let waiting = Task {
            var generation = waiters.generation
            while !stormOver.current {
                if await waiters.wait(after: generation, until: .now + .milliseconds(500)) == .changed { wakes.withLock { $0 += 1 } }
                generation = waiters.generation
                seen.withLock { $0 = generation }
            }
        }
        try await eventually("the wait was never registered", every: .milliseconds(5)) { waiters.count > 0 }
        let started = ContinuousClock.now
        var changes = 0
        while ContinuousClock.now - started < .seconds(1) {
            waiters.changed()
            changes += 1
            try await Task.sleep(for: .microseconds(500))
        }
        let lasted = ContinuousClock.now - started
        // The changes of the storm's last interval wake once more, at its end: the waiter has
        // seen every change and waits again.
        try await eventually("the storm's last changes never woke the waiter") { seen.current == waiters.generation && waiters.count == 1 }
        stormOver.withLock { $0 = true }
        await waiting.value
        let count = wakes.current
        let bound = Int(lasted / .milliseconds(50)) + 3
        #expect(count >= 1 && count <= bound, "\(count) wakes for \(changes) changes in \(lasted) (at most \(bound))")
    }

    @Test func theFirstChangeAfterAQuietPeriodWakesAtOnce() async throws {
        let waiters = IndexWaiters(debounce: .seconds(5), capacity: 10)
        let generation = waiters.generation
        let started = ContinuousClock.now
        async let wake = waiters.wait(after: generation, until: .now + .seconds(20))
        try await eventually("the wait was never registered") { waiters.count == 1 }
        waiters.changed()
        #expect(await wake == .changed)
        #expect(ContinuousClock.now - started < .seconds(4))
    }

    @Test func aWaiterPastItsDeadlineTimesOutAndAClosedSetAnswersAtOnce() async throws {
        let waiters = IndexWaiters(capacity: 1)
        let generation = waiters.generation
        #expect(await waiters.wait(after: generation, until: .now + .milliseconds(200)) == .timedOut)
        async let held = waiters.wait(after: generation, until: .now + .seconds(30))
        try await eventually("the wait was never registered", every: .milliseconds(5)) { waiters.count > 0 }
        #expect(await waiters.wait(after: generation, until: .now + .seconds(30)) == .full)
        waiters.close()
        #expect(await held == .closed)
        #expect(await waiters.wait(after: generation, until: .now + .seconds(30)) == .closed)
        #expect(waiters.count == 0)
    }

    /// Deadlines are kept in a heap: each waiter times out at its own deadline (in deadline
    /// order, whatever the order they came in), a cancelled one is never woken, and the
    /// entries cancelled waiters leave behind are dropped (the heap is rebuilt past 1,024 of them).
    @Test func eachWaiterTimesOutAtItsOwnDeadlineAndACancelledOneNever() async throws {
        let waiters = IndexWaiters(capacity: 5_000, sweepInterval: .milliseconds(10))
        let generation = waiters.generation
        let woken = Locked<[Int]>([])
        let start = ContinuousClock.now
        // Registered latest deadline first.
        var ids: [Int: UInt64] = [:]
        for index in (0..<5).reversed() {
            guard case .waiting(let id) = waiters.register(after: generation, until: start + .milliseconds(150 + 100 * index), wake: { wake in
                if wake == .timedOut { woken.withLock { $0.append(index) } }
            }) else { Issue.record("not waiting"); return }
            ids[index] = id
        }
        // 2,000 more, cancelled at once: their deadlines are far, and they must never wake.
        for _ in 0..<2_000 {
            guard case .waiting(let id) = waiters.register(after: generation, until: start + .milliseconds(200), wake: { _ in woken.withLock { $0.append(-1) } })
            else { Issue.record("not waiting"); return }
            waiters.cancel(id)
        }
        waiters.cancel(ids[2]!)
        #expect(waiters.count == 4)
        while waiters.count > 0, ContinuousClock.now - start < .seconds(30) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(woken.current == [0, 1, 3, 4])
        #expect(ContinuousClock.now - start >= .milliseconds(550))
    }
}
