import Foundation

/// The tests' one "wait until": checks `condition` every `interval` until it holds, for at
/// most `within`; false when it never did (the caller says what it waited for). Every wait for
/// something another task or process does — a watcher's poll, a child's output, a delivery —
/// goes through it, bounded, instead of a straight sleep that is too long on an idle machine
/// and too short on a loaded one.
///
/// ```swift
/// let served = try await eventually(within: .seconds(10)) { try await server.etag("items") == expected }
/// #expect(served, "the server never served \(expected)")
/// ```
@discardableResult
package func eventually(
    within limit: Duration = .seconds(10), every interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: interval)
    }
    return try await condition()
}

/// ``eventually(within:every:_:)`` that throws `failure` when the condition never held: for a
/// wait whose failure leaves the rest of the test meaningless.
package func eventually(
    _ failure: @autoclosure () -> String, within limit: Duration = .seconds(10), every interval: Duration = .milliseconds(20),
    _ condition: () async throws -> Bool
) async throws {
    guard try await eventually(within: limit, every: interval, condition) else { throw EventuallyFailed(description: failure()) }
}

/// What waited for never happened within its bound.
package struct EventuallyFailed: Error, CustomStringConvertible {
    package let description: String
}

/// Waits until the wall clock's second changes (half a second on average, never more than
/// one): what a time at one second's resolution — an HTTP date, a commit time — needs to
/// differ from one taken before, without a straight second-long sleep.
package func untilTheNextSecond() async throws {
    let now = Int64(Date().timeIntervalSince1970)
    try await eventually("the clock's second never changed", within: .seconds(2), every: .milliseconds(10)) {
        Int64(Date().timeIntervalSince1970) > now
    }
}
