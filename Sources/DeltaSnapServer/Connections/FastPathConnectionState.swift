import HTTPTypes
import NIOCore

/// One connection's requests as ``FastPathHandler`` sees them, as a plain value: every event
/// (a request's head or later part, a routed response's end, a read's end, a parser error, a
/// close) is a mutating call that returns what the handler does next — the shape of
/// swift-nio's `HTTPServerPipelineHandler`. The handler does the I/O; the rules are here:
///
/// - answers never overtake each other: a request is answered here only while none is with
///   the router, and a pipelined request first ends a held one's wait;
/// - a request answered here has its remaining parts (a GET's stray body, its end) dropped;
/// - bytes the HTTP parser refuses get one `400` when no request is in flight, else the
///   error goes on to the request's own handler (so no request ever gets two answers).
///
/// ```swift
/// var state = FastPathConnectionState<Int>()
/// if case .mayAnswerHere(let ended) = state.headReceived(request) { … state.answeredHere(holding: nil) }
/// ```
///
/// `Held` is what a request held here (a `GET /v1/index?wait=`) keeps until its answer.
struct FastPathConnectionState<Held> {
    enum Requests {
        /// Nothing in flight.
        case idle
        /// The request just answered or held here: its body and end are still to be dropped.
        case droppingParts(held: Held?)
        /// A request held here, read to its end, waiting for its answer.
        case holding(Held)
        /// `count` requests are with the router, their responses not ended; `last` the latest.
        case routed(count: Int, last: RequestSummary)
    }

    private(set) var requests = Requests.idle
    /// An answer was written here since the last flush.
    private var needsFlush = false
    /// A malformed request was answered: the connection is closing, later errors are its own.
    private var refusedMalformed = false

    init() {}

    // MARK: Reads

    enum HeadAction {
        /// Answer it here if memory can (then ``answeredHere(holding:)``), else ``routing(_:)``;
        /// `ending` first, with "no change": the held request before it.
        case mayAnswerHere(ending: Held?)
        /// An earlier request is with the router: this one goes there too (already counted).
        case route
    }

    mutating func headReceived(_ request: HTTPRequest) -> HeadAction {
        switch requests {
        case .idle:
            return .mayAnswerHere(ending: nil)
        case .holding(let held), .droppingParts(held: let held?):
            requests = .idle
            return .mayAnswerHere(ending: held)
        case .droppingParts(held: nil):
            // A head before the previous request's end cannot come from NIO's decoder.
            requests = .idle
            return .mayAnswerHere(ending: nil)
        case .routed(let count, _):
            requests = .routed(count: count + 1, last: RequestSummary(request))
            return .route
        }
    }

    /// The request of ``HeadAction/mayAnswerHere(ending:)`` was answered here, or is `holding` here.
    mutating func answeredHere(holding held: Held?) {
        requests = .droppingParts(held: held)
    }

    /// The request of ``HeadAction/mayAnswerHere(ending:)`` goes to the router.
    mutating func routing(_ request: HTTPRequest) {
        requests = .routed(count: 1, last: RequestSummary(request))
    }

    enum PartAction { case forward, drop }

    /// A request's body part or (`isEnd`) its end.
    mutating func partReceived(isEnd: Bool) -> PartAction {
        guard case .droppingParts(let held) = requests else { return .forward }
        if isEnd { requests = held.map(Requests.holding) ?? .idle }
        return .drop
    }

    /// Whether the read's end should flush what was answered during it (one flush per read:
    /// pipelined polls that arrived together leave together).
    mutating func readComplete() -> Bool {
        defer { needsFlush = false }
        return needsFlush
    }

    // MARK: Writes

    /// An answer was written here: flushed at the read's end, unless `flushedNow` (an answer
    /// that closes the connection flushes at once).
    mutating func answerWritten(flushedNow: Bool) {
        needsFlush = !flushedNow
    }

    /// A routed request's response ended.
    mutating func responseEnded() {
        guard case .routed(let count, let last) = requests else { return }
        requests = count > 1 ? .routed(count: count - 1, last: last) : .idle
    }

    // MARK: The held request

    /// The request held here, if any.
    var held: Held? {
        switch requests {
        case .holding(let held), .droppingParts(held: let held?): held
        default: nil
        }
    }

    /// Takes the held request to answer it (or to cancel its wait).
    mutating func takeHeld() -> Held? {
        switch requests {
        case .holding(let held):
            requests = .idle
            return held
        case .droppingParts(held: let held?):
            requests = .droppingParts(held: nil)
            return held
        default:
            return nil
        }
    }

    /// Holds `held` again (its wait re-registered), where the request it replaces was.
    mutating func hold(_ held: Held) {
        switch requests {
        case .droppingParts: requests = .droppingParts(held: held)
        default: requests = .holding(held)
        }
    }

    // MARK: Errors and the end

    enum ParserErrorAction {
        /// Answer `400` and close; `ending` first, with "no change".
        case refuse(ending: Held?)
        /// A request is with the router: the error is its handler's.
        case forward
        /// Refused already; the connection is closing.
        case ignore
    }

    mutating func parserError() -> ParserErrorAction {
        if case .routed = requests { return .forward }
        guard !refusedMalformed else { return .ignore }
        refusedMalformed = true
        return .refuse(ending: takeHeld())
    }

    /// A close passing from behind the handler: the request it leaves unanswered (and how many
    /// are), to be said — a client got an empty or cut reply. A close of input only is not one.
    func closing(mode: CloseMode) -> (request: RequestSummary, unanswered: Int)? {
        guard mode != .input, case .routed(let count, let last) = requests else { return nil }
        return (last, count)
    }
}

/// A routed request, as a close under it names it.
struct RequestSummary: Equatable {
    var method: HTTPRequest.Method
    var path: String

    init(_ request: HTTPRequest) {
        method = request.method
        path = request.path ?? ""
    }
}
