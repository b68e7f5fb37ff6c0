import NIOCore

/// What a connection was closed for taking too long (the `kind` of
/// `deltasnap_connection_timeouts_total`).
package enum ConnectionTimeout: String, Sendable, CaseIterable {
    /// A request head did not arrive whole within the header timeout.
    case head
    /// A request body made no progress for the body timeout while the server asked for more.
    case body
    /// A keep-alive connection sat with nothing in flight for the idle timeout.
    case idle
    /// The client read nothing of a response for the send timeout.
    case send
}

/// One connection's timing, as a plain value: events in (bytes, a request's head and end, a
/// response's end, writability), the phase and what expired out. No I/O and no timers: the
/// handler (``ConnectionGuardHandler``) feeds it and a per-loop sweep asks it, so it is
/// tested without a network (swift-nio's `HTTPServerPipelineHandler` shape).
///
/// ```swift
/// var clock = ConnectionClock(openedAt: .now())
/// clock.headArrived()
/// clock.requestEnded()
/// clock.responseEnded(at: .now())          // back to .idle: the idle timeout runs
/// clock.expired(at: .now() + .seconds(80), limits: limits)   // .idle
/// ```
package struct ConnectionClock: Sendable, Equatable {
    package enum Phase: Sendable, Equatable {
        /// Nothing in flight and nothing of a next request arrived.
        case idle(since: NIODeadline)
        /// Bytes of a request arrived (or the connection opened); its head is not whole yet.
        case awaitingHead(since: NIODeadline)
        /// A head arrived and its body is still coming.
        case readingBody
        /// Every request read; their responses are being made (a long-poll waits here).
        case responding
    }

    package private(set) var phase: Phase
    /// Heads received whose response has not ended.
    private var inFlight = 0
    /// The latest head's body has not ended.
    private var bodyOpen = false
    /// Since when the server has asked for bytes that have not come (the body timer).
    private var starvedSince: NIODeadline?
    /// Since when the socket has refused more of a response (the send timer).
    private var unwritableSince: NIODeadline?

    /// A fresh connection: its first head is due within the header timeout (nginx times the
    /// first request the same way).
    package init(openedAt now: NIODeadline) {
        phase = .awaitingHead(since: now)
    }

    package var isIdle: Bool {
        if case .idle = phase { true } else { false }
    }

    /// Since when the connection has been idle (nil: it is not).
    package var idleSince: NIODeadline? {
        if case .idle(let since) = phase { since } else { nil }
    }

    /// Request bytes arrived: on an idle connection, a next request has begun. (`now` is read
    /// only then, not for every chunk of a request or a body.)
    package mutating func bytesArrived(at now: @autoclosure () -> NIODeadline) {
        starvedSince = nil
        if case .idle = phase { phase = .awaitingHead(since: now()) }
    }

    /// The server has asked for bytes that have not come yet (the body timer runs).
    package var isStarved: Bool { starvedSince != nil }

    /// The server asked the socket for more bytes.
    package mutating func readRequested(at now: NIODeadline) {
        if starvedSince == nil { starvedSince = now }
    }

    package mutating func headArrived() {
        inFlight += 1
        bodyOpen = true
        phase = .readingBody
    }

    package mutating func requestEnded() {
        bodyOpen = false
        if inFlight > 0 { phase = .responding }
    }

    /// A response's last byte was written.
    package mutating func responseEnded(at now: NIODeadline) {
        inFlight = max(0, inFlight - 1)
        settle(at: now, partialHead: false)
    }

    /// A request answered before the HTTP decoder (``RawPollHandler``): it never was in
    /// flight here. `partialHead`: the start of the next request is already held.
    package mutating func answeredBeforeDecoder(at now: NIODeadline, partialHead: Bool) {
        settle(at: now, partialHead: partialHead)
    }

    private mutating func settle(at now: NIODeadline, partialHead: Bool) {
        guard inFlight == 0 else { return }
        if bodyOpen {
            phase = .readingBody
        } else {
            phase = partialHead ? .awaitingHead(since: now) : .idle(since: now)
        }
    }

    package mutating func writabilityChanged(isWritable: Bool, at now: NIODeadline) {
        if isWritable {
            unwritableSince = nil
        } else if unwritableSince == nil {
            unwritableSince = now
        }
    }

    /// The timeout that has run out at `now`, if any.
    package func expired(at now: NIODeadline, limits: ConnectionLimits) -> ConnectionTimeout? {
        switch phase {
        case .idle(let since):
            return now - since >= TimeAmount(limits.idleTimeout) ? .idle : nil
        case .awaitingHead(let since):
            return now - since >= TimeAmount(limits.headerTimeout) ? .head : nil
        case .readingBody:
            if let starvedSince, now - starvedSince >= TimeAmount(limits.bodyTimeout) { return .body }
            return sendExpired(at: now, limits: limits)
        case .responding:
            return sendExpired(at: now, limits: limits)
        }
    }

    private func sendExpired(at now: NIODeadline, limits: ConnectionLimits) -> ConnectionTimeout? {
        guard let unwritableSince else { return nil }
        return now - unwritableSince >= TimeAmount(limits.sendTimeout) ? .send : nil
    }
}
