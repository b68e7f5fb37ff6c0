@testable import DeltaSnapServer
import DeltaSnapTestSupport
import Foundation
import Testing

/// The debounce of ``IndexWaiters``: a storm of changes wakes a waiter a bounded number of
/// times, the first change of a quiet period at once.
@Suite struct IndexWaitersTests {
    @Test func aStormOfAThousandChangesWakesAWaiterOncePerInterval() async throws {
        let waiters = IndexWaiters(debounce: .milliseconds(50), capacity: 10)
        let wakes = Locked(0)
        let stop = ContinuousClock.now + .milliseconds(1_400)
        let waiting = Task {
            var generation = waiters.generation
            while ContinuousClock.now < stop {
                if await waiters.wait(after: generation, until: stop) == .changed { wakes.withLock { $0 += 1 } }
                generation = waiters.generation
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        for _ in 0..<1_000 {
            waiters.changed()
            try await Task.sleep(for: .microseconds(1_000))
        }
        await waiting.value
        // 1,000 changes over at least one second: about one wake per 50 ms, never one each.
        let count = wakes.current
        #expect(count >= 3 && count <= 1_000 / 50 * 2 + 4, "\(count) wakes")
    }

    @Test func theFirstChangeAfterAQuietPeriodWakesAtOnce() async throws {
        let waiters = IndexWaiters(debounce: .seconds(5), capacity: 10)
        let generation = waiters.generation
        let started = ContinuousClock.now
        async let wake = waiters.wait(after: generation, until: .now + .seconds(20))
        try await Task.sleep(for: .milliseconds(100))
        waiters.changed()
        #expect(await wake == .changed)
        #expect(ContinuousClock.now - started < .seconds(4))
    }

    @Test func aWaiterPastItsDeadlineTimesOutAndAClosedSetAnswersAtOnce() async throws {
        let waiters = IndexWaiters(capacity: 1)
        let generation = waiters.generation
        #expect(await waiters.wait(after: generation, until: .now + .milliseconds(200)) == .timedOut)
        async let held = waiters.wait(after: generation, until: .now + .seconds(30))
        try await Task.sleep(for: .milliseconds(100))
        #expect(await waiters.wait(after: generation, until: .now + .seconds(30)) == .full)
        waiters.close()
        #expect(await held == .closed)
        #expect(await waiters.wait(after: generation, until: .now + .seconds(30)) == .closed)
        #expect(waiters.count == 0)
    }
}
