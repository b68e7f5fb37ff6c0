import NIOConcurrencyHelpers
import NIOCore

/// The connections of one event loop: a sweep each second closes those whose timeout ran
/// out (one timer per loop rather than one per connection: a request then costs a clock
/// read, not a timer), and the idle ones are listed oldest first for the cap to reclaim.
/// Used on its event loop only.
final class ConnectionSweeper {
    /// A second, or a quarter of the shortest timeout when that is shorter (tests): a timed
    /// out connection is closed within one interval of its deadline.
    let interval: TimeAmount

    let eventLoop: any EventLoop
    let limits: ConnectionLimits
    let metrics: ConnectionMetrics
    /// The idle connections of this loop, readable from any loop: the cap reclaims the one
    /// idle the longest of all loops.
    let idle: NIOLockedValueBox<IdleSummary>
    private var connections: [ConnectionGuardHandler] = []
    private var oldestIdle: ConnectionGuardHandler?
    private var newestIdle: ConnectionGuardHandler?
    private var sweeping: RepeatedTask?
    private var idleCount = 0

    init(eventLoop: any EventLoop, limits: ConnectionLimits, metrics: ConnectionMetrics, idle: NIOLockedValueBox<IdleSummary>) {
        self.eventLoop = eventLoop
        self.limits = limits
        self.metrics = metrics
        self.idle = idle
        let shortest = [limits.headerTimeout, limits.bodyTimeout, limits.idleTimeout, limits.sendTimeout].min()!
        interval = min(.seconds(1), max(.milliseconds(50), TimeAmount(shortest / 4)))
    }

    func add(_ connection: ConnectionGuardHandler) {
        guard connection.slot < 0 else { return }
        connection.slot = connections.count
        connections.append(connection)
        syncIdle(connection)
        if sweeping == nil {
            // The sweeper holds no connection between sweeps, and stops with the last one: a
            // process that mounts many servers (tests) keeps no timer per idle server.
            let bound = NIOLoopBound(self, eventLoop: eventLoop)
            sweeping = eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
                bound.value.sweep(at: .now())
            }
        }
    }

    func remove(_ connection: ConnectionGuardHandler) {
        let slot = connection.slot
        guard slot >= 0, slot < connections.count, connections[slot] === connection else { return }
        if connection.listedIdleSince != nil {
            unlinkIdle(connection)
            publishIdle()
        }
        let last = connections.removeLast()
        if last !== connection {
            connections[slot] = last
            last.slot = slot
        }
        connection.slot = -1
        if connections.isEmpty {
            sweeping?.cancel()
            sweeping = nil
        }
    }

    /// Closes every connection whose timeout has run out at `now`.
    func sweep(at now: NIODeadline) {
        var expired: [(ConnectionGuardHandler, ConnectionTimeout)] = []
        for connection in connections {
            if let timeout = connection.clock.expired(at: now, limits: limits) { expired.append((connection, timeout)) }
        }
        for (connection, timeout) in expired {
            metrics.timedOut(timeout)
            connection.timeOut(timeout)
        }
    }

    /// Keeps the idle list (oldest at its head) in step with `connection`'s clock: not listed
    /// while busy; listed at the tail from the moment it went idle (again).
    func syncIdle(_ connection: ConnectionGuardHandler) {
        let since = connection.slot >= 0 ? connection.clock.idleSince : nil
        guard since != connection.listedIdleSince else { return }
        if connection.listedIdleSince != nil { unlinkIdle(connection) }
        if let since {
            connection.listedIdleSince = since
            connection.idlePrevious = newestIdle
            connection.idleNext = nil
            if let newestIdle { newestIdle.idleNext = connection } else { oldestIdle = connection }
            newestIdle = connection
            idleCount += 1
        }
        publishIdle()
    }

    private func unlinkIdle(_ connection: ConnectionGuardHandler) {
        connection.listedIdleSince = nil
        if let previous = connection.idlePrevious { previous.idleNext = connection.idleNext } else { oldestIdle = connection.idleNext }
        if let next = connection.idleNext { next.idlePrevious = connection.idlePrevious } else { newestIdle = connection.idlePrevious }
        connection.idlePrevious = nil
        connection.idleNext = nil
        idleCount -= 1
    }

    /// Tells the other loops (the cap's reclaim) what this one has idle.
    private func publishIdle() {
        let summary = IdleSummary(count: idleCount, oldestSince: oldestIdle?.listedIdleSince)
        idle.withLockedValue { $0 = summary }
    }

    /// Closes the connection idle the longest on this loop; false when none is idle.
    @discardableResult
    func reclaimOldestIdle() -> Bool {
        guard let oldest = oldestIdle else { return false }
        remove(oldest)
        metrics.reclaimed.increment()
        oldest.reclaim()
        return true
    }
}

/// What the other loops see of one loop's idle connections.
struct IdleSummary: Sendable {
    var count = 0
    /// Since when its oldest idle connection has been idle.
    var oldestSince: NIODeadline?
}
