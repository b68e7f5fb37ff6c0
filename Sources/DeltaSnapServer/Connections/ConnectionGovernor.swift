import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// Admits connections up to ``ConnectionLimits/maximumConnections``, and past it sheds load
/// rather than fall over: first the descriptors kept for small attachments give way, then the
/// keep-alive connection idle the longest is closed for the new one (as nginx reuses its
/// "reusable" connections), and with none idle the new one is answered `503` with
/// `Retry-After` and closed. One warning a minute at most says so while it lasts.
///
/// ```swift
/// switch governor.admit(channel) {
/// case .admitted(let sweeper): try channel.pipeline.syncOperations.addHandler(ConnectionGuardHandler(sweeper: sweeper, openedAt: .now()), position: .first)
/// case .shed: try channel.pipeline.syncOperations.addHandler(ShedConnectionHandler(), position: .first)
/// }
/// ```
final class ConnectionGovernor: Sendable {
    enum Admission {
        case admitted(ConnectionSweeper)
        case shed
    }

    private struct Loop: Sendable {
        let eventLoop: any EventLoop
        let sweeper: NIOLoopBound<ConnectionSweeper>
        let idle: NIOLockedValueBox<IdleSummary>
    }


    let limits: ConnectionLimits
    let metrics: ConnectionMetrics
    private let logger: Logger
    private let loops = NIOLockedValueBox<[ObjectIdentifier: Loop]>([:])
    /// Connections open now, shared with the kept attachment descriptors, which leave them room.
    private let open: ConnectionCount
    private let lastWarning = NIOLockedValueBox<NIODeadline?>(nil)
    /// Descriptors held open for small attachments, and how to let some go.
    private let keptFiles: @Sendable () -> Int
    private let releaseKeptFiles: @Sendable (Int) -> Void
    static let warningInterval: TimeAmount = .seconds(60)

    init(
        limits: ConnectionLimits, metrics: ConnectionMetrics, logger: Logger, open: ConnectionCount = ConnectionCount(),
        keptFiles: @escaping @Sendable () -> Int = { 0 }, releaseKeptFiles: @escaping @Sendable (Int) -> Void = { _ in }
    ) {
        self.open = open
        self.limits = limits
        self.metrics = metrics
        self.logger = logger
        self.keptFiles = keptFiles
        self.releaseKeptFiles = releaseKeptFiles
    }

    /// Decides on `channel`, just accepted: called on its event loop before it is registered.
    func admit(_ channel: any Channel) -> Admission {
        let open = self.open.opened()
        metrics.open.increment()
        channel.closeFuture.whenComplete { [self] _ in
            self.open.closed()
            metrics.open.decrement()
        }
        // Kept attachment descriptors come out of the same budget, and give way first.
        let kept = keptFiles()
        if kept > 0, open + kept > limits.maximumConnections {
            releaseKeptFiles(open + kept - limits.maximumConnections)
        }
        let sweeper = self.sweeper(for: channel.eventLoop)
        guard open > limits.maximumConnections else { return .admitted(sweeper) }
        if reclaimOldestIdle(from: channel.eventLoop, sweeper: sweeper) { return .admitted(sweeper) }
        metrics.shedAtCap.increment()
        warnWhileShedding(open: open)
        return .shed
    }

    /// Closes the connection idle the longest on any loop: at once on this one, else by
    /// asking its loop. The new connection is admitted at once; the count is over the cap by
    /// one until that close lands.
    private func reclaimOldestIdle(from eventLoop: any EventLoop, sweeper: ConnectionSweeper) -> Bool {
        let oldest = loops.withLockedValue { loops -> Loop? in
            var oldest: (Loop, NIODeadline)?
            for loop in loops.values {
                guard let since = loop.idle.withLockedValue({ $0.count > 0 ? $0.oldestSince : nil }) else { continue }
                if oldest == nil || since < oldest!.1 { oldest = (loop, since) }
            }
            return oldest?.0
        }
        guard let oldest else { return false }
        if oldest.eventLoop === eventLoop { return sweeper.reclaimOldestIdle() }
        oldest.eventLoop.execute { oldest.sweeper.value.reclaimOldestIdle() }
        return true
    }

    private func warnWhileShedding(open: Int) {
        let now = NIODeadline.now()
        let due = lastWarning.withLockedValue { last -> Bool in
            if let last, now - last < Self.warningInterval { return false }
            last = now
            return true
        }
        guard due else { return }
        logger.warning(
            "connections: at the cap of \(limits.maximumConnections) with none idle; new ones are answered 503 until some close (raise --max-connections, or the open-file limit it is derived from: ulimit -n / LimitNOFILE=)",
            metadata: ["open": "\(open)", "cap": "\(limits.maximumConnections)"])
    }

    /// The sweeper of `eventLoop`, made on its first connection.
    func sweeper(for eventLoop: any EventLoop) -> ConnectionSweeper {
        let key = ObjectIdentifier(eventLoop)
        if let known = loops.withLockedValue({ $0[key] }) { return known.sweeper.value }
        let idle = NIOLockedValueBox(IdleSummary())
        let sweeper = ConnectionSweeper(eventLoop: eventLoop, limits: limits, metrics: metrics, idle: idle)
        loops.withLockedValue { $0[key] = Loop(eventLoop: eventLoop, sweeper: NIOLoopBound(sweeper, eventLoop: eventLoop), idle: idle) }
        return sweeper
    }
}

/// Connections open now (admitted, or being refused): counted by the ``ConnectionGovernor``,
/// read by ``AttachmentMemory``, whose kept descriptors share the cap with them.
final class ConnectionCount: Sendable {
    private let count = NIOLockedValueBox(0)

    init() {}

    var value: Int { count.withLockedValue { $0 } }

    /// Counts one more; the count with it.
    func opened() -> Int {
        count.withLockedValue {
            $0 += 1
            return $0
        }
    }

    func closed() {
        count.withLockedValue { $0 -= 1 }
    }
}

/// Stops accepting (the kernel's backlog holds the rest) once the connections being refused
/// at the cap would eat into the descriptors kept for the store and the runtime: the last
/// guard, reached only when clients open connections faster than their `503`s close them.
struct DescriptorBackstop: AvailableConnectionsDelegate {
    let maximum: Int
    var open = 0

    mutating func connectionOpened() { open += 1 }
    mutating func connectionClosed() { open -= 1 }
    func isAcceptingNewConnections() -> Bool { open < maximum }
}
