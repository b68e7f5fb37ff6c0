import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import Testing

/// Every branch of the decision table (docs/PROTOCOL.md §5.1), without a network.
@Suite struct ServeDecisionTests {
    let epoch = "00000000000000e1"
    var head: CollectionHead {
        CollectionHead(name: "c", epoch: epoch, version: 10, checksum: .empty, count: 5, committedAt: 1_000_000, floor: 3)
    }
    /// Versions 1...10 committed one a second, at 999_991...1_000_000.
    func firstVersion(atOrAfter seconds: Int64) -> UInt64? {
        (1...10).first { 999_990 + Int64($0) >= seconds }.map(UInt64.init)
    }

    func decide(_ request: ConditionalRequest) -> ServeDecision {
        ServeDecision.decide(request, head: head, firstVersionCommitted: firstVersion(atOrAfter:))
    }

    @Test func noValidatorIsFull() {
        #expect(decide(ConditionalRequest(ifNoneMatch: nil, ifModifiedSince: nil)) == .full)
        #expect(decide(ConditionalRequest(ifNoneMatch: "  ", ifModifiedSince: nil)) == .full)
    }

    @Test func currentTokenIsNotModified() {
        #expect(decide(ConditionalRequest(ifNoneMatch: "\"\(epoch).10\"", ifModifiedSince: nil)) == .notModified)
        #expect(decide(ConditionalRequest(ifNoneMatch: "W/\"\(epoch).10\"", ifModifiedSince: nil)) == .notModified)
        #expect(decide(ConditionalRequest(ifNoneMatch: "\"x\", \"\(epoch).10\"", ifModifiedSince: nil)) == .notModified)
        #expect(decide(ConditionalRequest(ifNoneMatch: "*", ifModifiedSince: nil)) == .notModified)
    }

    @Test func olderTokenOfThisEpochIsADeltaOnThatToken() {
        #expect(decide(ConditionalRequest(ifNoneMatch: "\"\(epoch).7\"", ifModifiedSince: nil)) == .delta(sinceVersion: 7, base: "\(epoch).7"))
        #expect(decide(ConditionalRequest(ifNoneMatch: "\"\(epoch).3\"", ifModifiedSince: nil)) == .delta(sinceVersion: 3, base: "\(epoch).3"))
        // Of several, the newest usable one.
        #expect(decide(ConditionalRequest(ifNoneMatch: "\"\(epoch).4\", \"\(epoch).8\"", ifModifiedSince: nil)) == .delta(sinceVersion: 8, base: "\(epoch).8"))
    }

    @Test func tokenAheadOfTheHeadIsNotModified() {
        #expect(decide(ConditionalRequest(ifNoneMatch: "\"\(epoch).11\"", ifModifiedSince: nil)) == .notModified)
        #expect(decide(ConditionalRequest(ifNoneMatch: "\"\(epoch).99999\"", ifModifiedSince: nil)) == .notModified)
    }

    @Test(arguments: [
        "\"00000000000000ff.7\"",  // another epoch
        "\"00000000000000e1.2\"",  // below the floor (3)
        "\"00000000000000e1.07\"",  // not this server's spelling
        "\"garbage\"", "garbage", "\"\"", "\"00000000000000e1.\"", "\"00000000000000E1.7\"",
    ])
    func anythingElseIsFull(_ header: String) {
        #expect(decide(ConditionalRequest(ifNoneMatch: header, ifModifiedSince: nil)) == .full)
    }

    @Test func ifModifiedSinceIsInclusiveToTheSecond() {
        // A date equal to version 8's second resends version 8.
        #expect(decide(.modifiedSince(999_998)) == .delta(sinceVersion: 7, base: "\(epoch).7"))
        #expect(decide(.modifiedSince(1_000_000)) == .delta(sinceVersion: 9, base: "\(epoch).9"))
        #expect(decide(.modifiedSince(1_000_001)) == .notModified)
        // So early that the delta would start below the floor, or at the beginning: full.
        #expect(decide(.modifiedSince(999_993)) == .full)
        #expect(decide(.modifiedSince(0)) == .full)
    }

    @Test func ifModifiedSinceParsesHTTPDatesAndIgnoresInvalidOnes() {
        #expect(ConditionalRequest(ifNoneMatch: nil, ifModifiedSince: "Sun, 06 Nov 1994 08:49:37 GMT") == .modifiedSince(784_111_777))
        #expect(ConditionalRequest(ifNoneMatch: nil, ifModifiedSince: "yesterday") == .invalidModifiedSince)
        #expect(decide(.invalidModifiedSince) == .full)
    }

    @Test func ifNoneMatchWinsOverIfModifiedSince() {
        let request = ConditionalRequest(ifNoneMatch: "\"garbage\"", ifModifiedSince: HTTPDate.format(2_000_000))
        #expect(request == .entityTags(["garbage"]))
        #expect(decide(request) == .full)
    }
}
