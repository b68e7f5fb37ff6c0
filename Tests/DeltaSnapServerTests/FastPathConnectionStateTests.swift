import HTTPTypes
import NIOCore
import Testing

@testable import DeltaSnapServer

/// The fast path's rules for one connection, as a value: no channel, no server.
@Suite struct FastPathConnectionStateTests {
    typealias State = FastPathConnectionState<String>
    static let poll = HTTPRequest(method: .get, scheme: nil, authority: "x", path: "/v1/collections/items")
    static let put = HTTPRequest(method: .put, scheme: nil, authority: "x", path: "/v1/collections/items/records/a")

    func mayAnswer(_ action: State.HeadAction) -> String?? {
        if case .mayAnswerHere(let ending) = action { ending } else { nil }
    }

    @Test func aRequestIsAnsweredHereOnlyWhileNoneIsWithTheRouter() {
        var state = State()
        #expect(mayAnswer(state.headReceived(Self.put)) == .some(nil))
        state.routing(Self.put)
        // Pipelined behind a routed request: to the router too, though memory could answer it.
        guard case .route = state.headReceived(Self.poll) else { Issue.record("a poll behind a routed request went ahead of it"); return }
        #expect(state.partReceived(isEnd: true) == .forward)
        #expect(state.closing(mode: .all).map { [$0.request.path, "\($0.unanswered)"] } == ["/v1/collections/items", "2"])
        state.responseEnded()
        #expect(state.closing(mode: .all)?.unanswered == 1)
        state.responseEnded()
        // Both answered: nothing to name, and the next request may be answered here again.
        #expect(state.closing(mode: .all) == nil)
        #expect(mayAnswer(state.headReceived(Self.poll)) == .some(nil))
    }

    @Test func anAnsweredRequestsPartsAreDroppedAndItsAnswerFlushedOncePerRead() {
        var state = State()
        _ = state.headReceived(Self.poll)
        state.answeredHere(holding: nil)
        state.answerWritten(flushedNow: false)
        #expect(state.partReceived(isEnd: false) == .drop)
        #expect(state.partReceived(isEnd: true) == .drop)
        #expect(state.partReceived(isEnd: true) == .forward)
        #expect(state.readComplete() == true)
        #expect(state.readComplete() == false)
        // An answer that closes the connection is flushed at once, not again at the read's end.
        _ = state.headReceived(Self.poll)
        state.answeredHere(holding: nil)
        state.answerWritten(flushedNow: true)
        #expect(state.readComplete() == false)
    }

    @Test func aPipelinedRequestEndsAHeldWaitFirst() {
        var state = State()
        _ = state.headReceived(Self.poll)
        state.answeredHere(holding: "wait-1")
        #expect(state.held == "wait-1")
        _ = state.partReceived(isEnd: true)
        #expect(state.held == "wait-1")
        #expect(mayAnswer(state.headReceived(Self.poll)) == .some("wait-1"))
        #expect(state.held == nil)
        // Re-held after a wake, then taken by its answer.
        state.answeredHere(holding: "wait-2")
        state.hold("wait-3")
        #expect(state.takeHeld() == "wait-3")
        #expect(state.takeHeld() == nil)
        // Its own parts are still dropped once its answer went out early.
        #expect(state.partReceived(isEnd: true) == .drop)
    }

    @Test func aParserErrorIsRefusedOnceAndOnlyWithNothingRouted() {
        var state = State()
        _ = state.headReceived(Self.put)
        state.routing(Self.put)
        guard case .forward = state.parserError() else { Issue.record("an error in a routed request's body is its handler's"); return }
        state.responseEnded()
        _ = state.headReceived(Self.poll)
        state.answeredHere(holding: "held")
        _ = state.partReceived(isEnd: true)
        guard case .refuse(ending: "held") = state.parserError() else { Issue.record("a held request is answered before the 400"); return }
        guard case .ignore = state.parserError() else { Issue.record("one 400 per connection"); return }
    }

    @Test func aCloseOfInputOnlyNamesNothing() {
        var state = State()
        _ = state.headReceived(Self.put)
        state.routing(Self.put)
        #expect(state.closing(mode: .input) == nil)
        #expect(state.closing(mode: .output)?.request == RequestSummary(Self.put))
    }
}
