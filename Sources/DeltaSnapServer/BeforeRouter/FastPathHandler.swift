import DeltaSnapCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// Answers the polls that need nothing but memory — a current token (`304`) or an older one
/// whose delta is cached, and a small public attachment held in memory — on the connection's event loop, before the request reaches
/// Hummingbird's router: no task, no async hop, no router or middleware. Most of a
/// deployment's traffic is exactly these polls.
///
/// What to answer is ``MemoryAnswers``' call (the decision table's,
/// with the same headers and metrics as the router's path); when it may answer is
/// ``FastPathConnectionState``'s (only while no earlier request of the connection is with
/// the router, so responses never overtake each other; the answered request's remaining
/// parts dropped; a parser error answered once, with ``MalformedRequestAnswer``). This type
/// is only the NIO plumbing.
final class FastPathHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let answers: MemoryAnswers
    private var writer: PollResponseWriter
    /// What is in flight on the connection, and so what this handler may do.
    private var state = FastPathConnectionState<Held>()
    private let logger: Logger

    init(answers: MemoryAnswers, logger: Logger) {
        self.answers = answers
        self.logger = logger
        writer = PollResponseWriter(answers: answers, logger: logger)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            let start = ContinuousClock.now
            guard case .mayAnswerHere(let ending) = state.headReceived(request) else { return context.fireChannelRead(data) }
            // A pipelined request ends a held one's wait: answers keep their order.
            if let ending { answer(ending, changedTo: nil, context: context) }
            if answerHere(request, start: start, context: context) { return }
            state.routing(request)
            context.fireChannelRead(data)
        case .body:
            if state.partReceived(isEnd: false) == .forward { context.fireChannelRead(data) }
        case .end:
            if state.partReceived(isEnd: true) == .forward { context.fireChannelRead(data) }
        }
    }

    /// Answers (or holds) `request` from memory when it can; false when the router must.
    private func answerHere(_ request: HTTPRequest, start: ContinuousClock.Instant, context: ChannelHandlerContext) -> Bool {
        if let wait = answers.index.parkableWait(request) {
            switch hold(wait, request: AnsweredRequest(request), start: start, context: context) {
            case .waiting(let held):
                state.answeredHere(holding: held)
                return true
            case .answerNow(let held):
                state.answeredHere(holding: nil)
                answer(held, changedTo: nil, context: context)
                return true
            case .notHeld:
                break
            }
        }
        if let answer = answers.index.indexAnswerFromMemory(request) {
            state.answeredHere(holding: nil)
            writeIndexAnswer(answer, to: AnsweredRequest(request), start: start, context: context)
            return true
        }
        if let answer = answers.attachmentFromMemory(request) {
            state.answeredHere(holding: nil)
            let body: ByteBuffer? = if case .bytes(let bytes) = answer.body { bytes } else { nil }
            write(status: answer.status, headers: answer.headers, body: body, route: .attachment, to: AnsweredRequest(request), start: start, context: context)
            return true
        }
        if let answer = answers.fastAnswer(to: request, start: start) {
            state.answeredHere(holding: nil)
            write(answer, to: AnsweredRequest(request), start: start, context: context)
            return true
        }
        return false
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let held = state.takeHeld(), held.id != 0 { answers.index.waiters.cancel(held.id) }
        context.fireChannelInactive()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if state.readComplete() { context.flush() }
        context.fireChannelReadComplete()
    }

    /// Bytes the HTTP parser refuses: `400` with a JSON body and a close, when no request is
    /// in flight (``MalformedRequestAnswer``).
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parserError = error as? HTTPParserError else { return context.fireErrorCaught(error) }
        switch state.parserError() {
        case .forward:
            context.fireErrorCaught(error)
        case .ignore:
            break
        case .refuse(let ending):
            if let ending { answer(ending, changedTo: nil, context: context) }
            MalformedRequestAnswer.write(parserError, metrics: answers.metrics, context: context)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { state.responseEnded() }
        context.write(data, promise: promise)
    }

    /// A close from behind this handler (Hummingbird's connection task, its state handler)
    /// while a request is with the router leaves its client an empty or cut reply: said at
    /// warning level, with the request, since nothing else would show it (a close that the
    /// client's end of input or a failed read caused comes from NIO itself, not through here).
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if let (request, unanswered) = state.closing(mode: mode) {
            logger.warning("closing a connection with a request unanswered", metadata: [
                "method": "\(request.method)", "path": "\(request.path)", "unanswered": "\(unanswered)", "mode": "\(mode)",
            ])
        }
        context.close(mode: mode, promise: promise)
    }

    // MARK: - Held requests on the public index

    /// A `GET /v1/index?wait=` held here, with no task: a closure in ``IndexWaiters`` and
    /// this value are all it costs beyond its connection.
    struct Held {
        /// Its registration with ``IndexWaiters`` (0: none).
        var id: UInt64
        var wait: IndexController.ParkableWait
        var request: AnsweredRequest
        var start: ContinuousClock.Instant
    }

    private enum Holding {
        case waiting(Held)
        /// The wait is over already (its deadline, or shutdown): answer "no change" now.
        case answerNow(Held)
        /// The router answers (the index changed already, or no more requests may wait).
        case notHeld
    }

    /// Registers `wait` until the public index changes, its deadline or shutdown.
    private func hold(_ wait: IndexController.ParkableWait, request: AnsweredRequest, start: ContinuousClock.Instant, context: ChannelHandlerContext) -> Holding {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        switch answers.index.waiters.register(after: wait.generation, until: wait.deadline, wake: { wake in
            bound.eventLoop.execute {
                let (handler, context) = bound.value
                handler.woken(wake, context: context)
            }
        }) {
        case .waiting(let id):
            return .waiting(Held(id: id, wait: wait, request: request, start: start))
        case .immediate(.timedOut), .immediate(.closed):
            return .answerNow(Held(id: 0, wait: wait, request: request, start: start))
        case .immediate(.changed), .immediate(.full):
            return .notHeld
        }
    }

    /// On the event loop.
    private func woken(_ wake: IndexWaiters.Wake, context: ChannelHandlerContext) {
        guard let held = state.held else { return }
        guard wake == .changed else { return answerHeld(changedTo: nil, context: context) }
        let generation = answers.index.waiters.generation
        if let fresh = answers.index.viewIndex.fromMemory(for: held.wait.caller) {
            return settle(held, fresh: fresh, generation: generation, context: context)
        }
        // The index must be rebuilt (read and signed): off the event loop, once for every
        // request woken by this change (the publisher builds each document once).
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let index = answers.index
        Task {
            let caller = held.wait.caller
            let rebuilt = try? await index.viewIndex.current(for: caller)
            bound.eventLoop.execute {
                let (handler, context) = bound.value
                guard let held = handler.state.held else { return }
                guard let rebuilt else { return handler.answerHeld(changedTo: nil, context: context) }
                handler.settle(held, fresh: rebuilt, generation: generation, context: context)
            }
        }
    }

    /// Answers `held` with `fresh` when it differs from what the client holds, else waits on.
    private func settle(_ held: Held, fresh: IndexPublisher.Published, generation: UInt64, context: ChannelHandlerContext) {
        // What the client holds is the held document (it matched their ETag when held).
        if !ViewIndex.holds(held.wait.published.etag, fresh) { return answerHeld(changedTo: fresh, context: context) }
        var wait = held.wait
        wait.generation = generation
        switch hold(wait, request: held.request, start: held.start, context: context) {
        case .waiting(let again):
            state.hold(again)
        case .answerNow, .notHeld:
            // Changed again meanwhile, or no room: the answer is due now.
            answerHeld(changedTo: nil, context: context)
        }
    }

    /// Answers the held request: `changedTo` the new index, or nil for "no change".
    private func answerHeld(changedTo fresh: IndexPublisher.Published?, context: ChannelHandlerContext) {
        guard let held = state.takeHeld() else { return }
        answer(held, changedTo: fresh, context: context)
    }

    /// Writes `held`'s answer, flushed at once (its wait may end outside a read).
    private func answer(_ held: Held, changedTo fresh: IndexPublisher.Published?, context: ChannelHandlerContext) {
        if held.id != 0 { answers.index.waiters.cancel(held.id) }
        let answer = IndexController.heldAnswer(
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
        state.answerWritten(flushedNow: request.asksToClose)
        if request.asksToClose {
            // Answered here, so Hummingbird, which closes such a connection after its own
            // answers, never saw the request: close it once the answer is out.
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in loopBound.value.close(promise: nil) }
        } else {
            context.write(wrapOutboundOut(.end(nil)), promise: nil)
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
