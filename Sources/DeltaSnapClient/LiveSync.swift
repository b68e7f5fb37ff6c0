import Foundation

/// How a client in live mode waits for changes (docs/CLIENT.md, "Live mode").
///
/// ```swift
/// let live = Task { await view.live(LiveOptions(wait: 30)) { report in refreshUI(report) } }
/// // the app goes to the background:
/// live.cancel()
/// ```
public struct LiveOptions: Sendable, Equatable {
    /// Seconds each request waits on the server for a change (1–60).
    public var wait: Int
    /// Between plain polls, once held requests do not get through (a proxy cuts them).
    public var pollInterval: Duration
    /// The longest pause after failures in a row (it doubles from one second).
    public var maximumBackoff: Duration

    public init(wait: Int = 30, pollInterval: Duration = .seconds(30), maximumBackoff: Duration = .seconds(300)) {
        self.wait = min(60, max(1, wait))
        self.pollInterval = pollInterval
        self.maximumBackoff = maximumBackoff
    }
}

/// The loop of live mode as a value: wait on the server's index → pull what changed → wait
/// again, and the fallback when held requests fail.
///
/// A held request that fails after it was held a while was cut by something between (a
/// proxy's read timeout): later waits are half as long as it lasted, down to plain polling
/// every ``LiveOptions/pollInterval``. A request that fails at once (no server, an error
/// answer) backs off, doubling up to ``LiveOptions/maximumBackoff``; the server's own waits
/// (`Retry-After`, `Backoff`) are kept by the replica, which answers `deferred` until they end.
struct LiveLoop {
    enum Step: Sendable {
        /// The index changed and what it names was pulled.
        case changed
        /// The wait ended with no change.
        case unchanged
        /// Nothing may be sent before this time (the server asked).
        case deferred(until: Date)
        case failed
    }

    let options: LiveOptions
    /// Seconds the next request waits; nil: a plain poll.
    private(set) var wait: Int?
    private var failures = 0

    init(options: LiveOptions) {
        self.options = options
        wait = options.wait
    }

    /// What to do after `step`, which ran for `held`: the pause before the next one.
    mutating func pause(after step: Step, held: Duration, now: Date = Date()) -> Duration {
        switch step {
        case .changed, .unchanged:
            failures = 0
            return wait == nil ? options.pollInterval : .zero
        case .deferred(let until):
            return .milliseconds(max(0, Int(until.timeIntervalSince(now) * 1000)))
        case .failed:
            failures += 1
            if let current = wait, held >= .seconds(1), held < .seconds(current) {
                let seconds = Int(held.components.seconds) / 2
                wait = seconds >= 1 ? seconds : nil
                return .zero
            }
            let doubled = Duration.seconds(1 << min(failures - 1, 20))
            return min(doubled, options.maximumBackoff)
        }
    }

    /// Runs `step` (given the seconds to wait, or nil for a plain poll) until the task is
    /// cancelled.
    mutating func run(isolation: isolated (any Actor)? = #isolation, _ step: (Int?) async -> Step) async {
        while !Task.isCancelled {
            let started = ContinuousClock.now
            let outcome = await step(wait)
            let pause = pause(after: outcome, held: ContinuousClock.now - started)
            if pause > .zero { try? await Task.sleep(for: pause) }
        }
    }
}
