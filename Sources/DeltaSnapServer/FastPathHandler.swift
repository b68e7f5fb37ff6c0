import DeltaSnapCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes

/// Answers the polls that need nothing but memory — a current token (`304`) or an older one
/// whose delta is cached, and a small public attachment held in memory — on the connection's event loop, before the request reaches
/// Hummingbird's router: no task, no async hop, no router or middleware. Most of a
/// deployment's traffic is exactly these polls.
///
/// What to answer is ``DeltaSnapAPI/fastAnswer(to:start:)``'s call (the decision table's,
/// with the same headers and metrics as the router's path); this type is only the NIO
/// plumbing. It answers only while no earlier request of the connection is with the router,
/// so responses never overtake each other, and it drops the answered request's remaining
/// parts (its end, and a body should a GET carry one).
final class FastPathHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let service: DeltaSnapAPI
    private var writer: PollResponseWriter
    /// Requests handed to the router whose response has not ended yet (shared with
    /// ``MalformedRequestHandler``).
    private let routed: RoutedRequests
    /// Dropping the rest of a request this handler answered.
    private var droppingRequestParts = false
    private var needsFlush = false

    private let logger: Logger
    /// The last request handed to the router, named when the connection is closed under it.
    private var lastRouted: HTTPRequest?

    init(service: DeltaSnapAPI, logger: Logger, routed: RoutedRequests) {
        self.routed = routed
        self.service = service
        self.logger = logger
        writer = PollResponseWriter(service: service, logger: logger)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            let start = ContinuousClock.now
            // A pipelined request ends a held one's wait: answers keep their order.
            if parked != nil { answerParked(changedTo: nil, context: context) }
            if routed.count == 0, let wait = service.parkableWait(request), park(wait, request: AnsweredRequest(request), start: start, context: context) {
                droppingRequestParts = true
                return
            }
            if routed.count == 0, let answer = service.indexAnswerFromMemory(request) {
                droppingRequestParts = true
                writeIndexAnswer(answer, to: AnsweredRequest(request), start: start, context: context)
                return
            }
            if routed.count == 0, let answer = service.attachmentFromMemory(request) {
                droppingRequestParts = true
                let body: ByteBuffer? = if case .bytes(let bytes) = answer.body { bytes } else { nil }
                write(status: answer.status, headers: answer.headers, body: body, route: .attachment, to: AnsweredRequest(request), start: start, context: context)
                return
            }
            if routed.count == 0, let answer = service.fastAnswer(to: request, start: start) {
                droppingRequestParts = true
                write(answer, to: AnsweredRequest(request), start: start, context: context)
                return
            }
            routed.count += 1
            lastRouted = request
            context.fireChannelRead(data)
        case .body:
            if !droppingRequestParts { context.fireChannelRead(data) }
        case .end:
            if droppingRequestParts {
                droppingRequestParts = false
            } else {
                context.fireChannelRead(data)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let parked { service.waiters.cancel(parked.id) }
        parked = nil
        context.fireChannelInactive()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // One flush per read: pipelined polls that arrived together leave together.
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            routed.count -= 1
            // Nothing unanswered to name: an idle keep-alive connection holds no request.
            if routed.count == 0 { lastRouted = nil }
        }
        context.write(data, promise: promise)
    }

    /// A close from behind this handler (Hummingbird's connection task, its state handler)
    /// while a request is with the router leaves its client an empty or cut reply: said at
    /// warning level, with the request, since nothing else would show it (a close that the
    /// client's end of input or a failed read caused comes from NIO itself, not through here).
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode != .input, routed.count > 0, let request = lastRouted {
            logger.warning("closing a connection with a request unanswered", metadata: [
                "method": "\(request.method)", "path": "\(request.path ?? "")", "unanswered": "\(routed.count)", "mode": "\(mode)",
            ])
        }
        context.close(mode: mode, promise: promise)
    }

    // MARK: - Held requests on the public index

    /// A `GET /v1/index?wait=` held here, with no task: a closure in ``IndexWaiters`` and
    /// this value are all it costs beyond its connection.
    private struct Parked {
        var id: UInt64
        var wait: DeltaSnapAPI.ParkableWait
        var request: AnsweredRequest
        var start: ContinuousClock.Instant
    }

    private var parked: Parked?

    /// Holds `wait` until the public index changes, its deadline or shutdown; false when the
    /// router must answer instead (it changed already, or no more requests may wait).
    private func park(_ wait: DeltaSnapAPI.ParkableWait, request: AnsweredRequest, start: ContinuousClock.Instant, context: ChannelHandlerContext) -> Bool {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        switch service.waiters.register(after: wait.generation, until: wait.deadline, wake: { wake in
            bound.eventLoop.execute {
                let (handler, context) = bound.value
                handler.woken(wake, context: context)
            }
        }) {
        case .waiting(let id):
            parked = Parked(id: id, wait: wait, request: request, start: start)
            return true
        case .immediate(.timedOut), .immediate(.closed):
            parked = Parked(id: 0, wait: wait, request: request, start: start)
            answerParked(changedTo: nil, context: context)
            return true
        case .immediate(.changed), .immediate(.full):
            return false
        }
    }

    /// On the event loop.
    private func woken(_ wake: IndexWaiters.Wake, context: ChannelHandlerContext) {
        guard let held = parked else { return }
        guard wake == .changed else { return answerParked(changedTo: nil, context: context) }
        let generation = service.waiters.generation
        if let fresh = service.viewIndex.fromMemory(for: held.wait.caller) {
            return settle(held, fresh: fresh, generation: generation, context: context)
        }
        // The index must be rebuilt (read and signed): off the event loop, once for every
        // request woken by this change (the publisher builds each document once).
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let service = service
        Task {
            let caller = held.wait.caller
            let rebuilt = try? await service.viewIndex.current(for: caller)
            bound.eventLoop.execute {
                let (handler, context) = bound.value
                guard let held = handler.parked else { return }
                guard let rebuilt else { return handler.answerParked(changedTo: nil, context: context) }
                handler.settle(held, fresh: rebuilt, generation: generation, context: context)
            }
        }
    }

    /// Answers `held` with `fresh` when it differs from what the client holds, else waits on.
    private func settle(_ held: Parked, fresh: IndexPublisher.Published, generation: UInt64, context: ChannelHandlerContext) {
        // What the client holds is the parked document (it matched their ETag when parked).
        if !ViewIndex.holds(held.wait.published.etag, fresh) { return answerParked(changedTo: fresh, context: context) }
        var wait = held.wait
        wait.generation = generation
        parked = nil
        if !park(wait, request: held.request, start: held.start, context: context) {
            // Changed again meanwhile, or no room: the answer is due now.
            parked = held
            answerParked(changedTo: nil, context: context)
        }
    }

    /// Writes the parked request's answer: `changedTo` the new index, or nil for "no change".
    private func answerParked(changedTo fresh: IndexPublisher.Published?, context: ChannelHandlerContext) {
        guard let held = parked else { return }
        parked = nil
        if held.id != 0 { service.waiters.cancel(held.id) }
        let answer = DeltaSnapAPI.heldAnswer(
            fresh ?? held.wait.published, changed: fresh != nil, viaIfNoneMatch: held.wait.viaIfNoneMatch, cursor: held.wait.cursor,
            headers: held.wait.headers)
        writeIndexAnswer(answer, to: held.request, start: held.start, context: context)
        context.flush()
    }

    /// Writes an answer of `GET /v1/index` given here (flushed with the read, or by the caller).
    private func writeIndexAnswer(
        _ answer: (status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer?), to request: AnsweredRequest, start: ContinuousClock.Instant,
        context: ChannelHandlerContext
    ) {
        var headers = answer.headers
        if let length = answer.body?.readableBytes { headers[.contentLength] = String(length) }
        write(status: answer.status, headers: headers, body: answer.body, route: .index, to: request, start: start, context: context)
    }

    private func write(_ answer: FastAnswer, to request: AnsweredRequest, start: ContinuousClock.Instant, context: ChannelHandlerContext) {
        switch answer {
        case .notModified(let served):
            write(status: .notModified, headers: served.validatorHeaders, body: nil, route: .collection, to: request, start: start, context: context)
        case .delta(let cached):
            write(status: .ok, headers: cached.headers, body: cached.body, route: .collection, to: request, start: start, context: context)
        }
    }

    /// The one writer of this handler's answers: head (with ``PollResponseWriter``'s `Date` and
    /// request id), body for a `GET`, end; then counted and logged.
    private func write(
        status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer?, route: PollResponseWriter.Route, to request: AnsweredRequest,
        start: ContinuousClock.Instant, context: ChannelHandlerContext
    ) {
        var headers = headers
        let identity = writer.stamp(&headers, status: status, clientsID: request.clientsID)
        let body = request.method == .get ? body : nil
        context.write(wrapOutboundOut(.head(HTTPResponse(status: status, headerFields: headers))), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(body)), promise: nil) }
        if request.asksToClose {
            // Answered here, so Hummingbird, which closes such a connection after its own
            // answers, never saw the request: close it once the answer is out.
            needsFlush = false
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in loopBound.value.close(promise: nil) }
        } else {
            context.write(wrapOutboundOut(.end(nil)), promise: nil)
            needsFlush = true
        }
        writer.finished(
            identity, route: route, method: request.method, path: request.path, status: status, since: start, bodyBytes: body?.readableBytes)
    }
}

/// What answering a request needs of it: kept instead of its `HTTPRequest` while the request
/// is held, because the request's header storage (~0.5 KB) would be a twentieth of what a
/// waiting connection costs (docs/BENCHMARKS.md, "where a held connection's memory goes").
struct AnsweredRequest {
    let method: HTTPRequest.Method
    let path: String
    /// The client's `X-Request-Id`, echoed in the answer.
    let clientsID: String?
    /// `Connection: close`: the client wants the connection closed after this answer.
    let asksToClose: Bool

    init(_ request: HTTPRequest) {
        method = request.method
        path = request.path ?? ""
        clientsID = request.headerFields[.xRequestID]
        asksToClose = request.headerFields[values: .connection].contains { $0.lowercased().contains("close") }
    }
}

/// How many of a connection's requests are with the router (their response not ended): the
/// fast path answers only when none is, and so does ``MalformedRequestHandler``. One per
/// connection, used on its event loop only.
final class RoutedRequests {
    var count = 0
}

/// The `Date` header's value, formatted once per second (one per connection handler: no lock).
struct DateHeader {
    private var second: Int64 = -1
    private var value = ""

    mutating func now() -> String {
        let current = Int64(Date().timeIntervalSince1970)
        if current != second {
            second = current
            value = HTTPDate.format(current)
        }
        return value
    }
}
