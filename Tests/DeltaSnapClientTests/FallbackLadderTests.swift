import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapSynthetic
import DeltaSnapTestSupport
import Foundation
import Testing

/// Each rung of the fallback ladder, each trigger, against a scripted server. The replica
/// must always end holding a complete, verified state.
@Suite struct FallbackLadderTests {
    let generator = SyntheticRecords(seed: 2)
    var oldRecords: [Record] { (0..<40).map { generator.record(index: $0) } }
    /// The server's newer state: record 0 changed, record 1 hidden, record 40 added.
    var newRecords: [Record] { [generator.record(index: 0, revision: 1)] + (2...40).map { generator.record(index: $0) } }

    /// A replica holding `oldRecords` at token "old.1" (loaded from a bundled snapshot).
    func makeReplica(_ dir: TemporaryDirectory, url: URL, timeout: Duration = .seconds(5)) throws -> DeltaSnapReplica {
        let snapshot = try dir.write("items.snapshot", bytes: Bodies.make(kind: .full, token: "old.1", records: oldRecords, visibleState: oldRecords))
        return try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: url, bundledSnapshot: snapshot, timeout: timeout)
    }

    var goodDelta: [UInt8] {
        Bodies.make(kind: .delta, base: "old.1", token: "new.2",
                    records: [generator.record(index: 0, revision: 1), Record.tombstone(id: SyntheticRecords.id(1)), generator.record(index: 40)],
                    visibleState: newRecords)
    }

    var goodFull: [UInt8] { Bodies.make(kind: .full, token: "new.2", records: newRecords.sorted { $0.id.utf8Precedes($1.id) }, visibleState: newRecords) }

    static let triggers: [String] = ["truncated gzip", "invalid JSON", "wrong base", "checksum mismatch", "count mismatch", "another collection"]

    func badReply(_ trigger: String) -> [UInt8] {
        switch trigger {
        case "truncated gzip": return Array(goodDelta.prefix(goodDelta.count / 2))
        case "invalid JSON": return GzipCompressor.compress(Array(#"{"format":1,"collection":"items","kind":"delta", oops"#.utf8))
        case "wrong base":
            return Bodies.make(kind: .delta, base: "someone-else.7", token: "new.2", records: [generator.record(index: 40)], visibleState: newRecords)
        case "checksum mismatch":
            return Bodies.make(kind: .delta, base: "old.1", token: "new.2", records: [generator.record(index: 40)], visibleState: newRecords)
        case "count mismatch":
            let text = String(decoding: try! GzipDecompressor.decompress(goodDelta), as: UTF8.self).replacingOccurrences(of: #""count":3"#, with: #""count":4"#)
            return GzipCompressor.compress(Array(text.utf8))
        default:
            return Bodies.make(kind: .delta, collection: "other", base: "old.1", token: "new.2", records: [], visibleState: oldRecords)
        }
    }

    @Test(arguments: triggers)
    func aDeltaThatCannotBeAppliedIsFollowedByOneFullFetch(_ trigger: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bad = badReply(trigger)
        let full = goodFull
        let server = try await ScriptedServer.start { request, _ in
            request.headers["if-none-match"] == nil
                ? .init(headers: ["Content-Encoding": "gzip", "ETag": "\"new.2\""], body: full)
                : .init(headers: ["Content-Encoding": "gzip", "ETag": "\"new.2\""], body: bad)
        }
        let replica = try makeReplica(dir, url: server.url)
        let outcome = await replica.sync()
        guard case .reset(let result, let reason) = outcome else { Issue.record("\(trigger): expected a reset, got \(outcome)"); return }
        #expect(result.kind == .full && result.count == newRecords.count, "\(trigger)")
        #expect(!reason.isEmpty)
        #expect(try await replica.verify(), "\(trigger)")
        #expect(await replica.token == "new.2")
        #expect(await replica.count == newRecords.count)
        #expect(server.received.count == 2)
        await server.stop()
    }

    @Test func aGoodDeltaAppliesWithoutAReset() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let delta = goodDelta
        let server = try await ScriptedServer.start { _, _ in .init(headers: ["Content-Encoding": "gzip", "ETag": "\"new.2\""], body: delta) }
        let replica = try makeReplica(dir, url: server.url)
        guard case .applied(let result) = await replica.sync() else { Issue.record("not applied"); return }
        #expect(result.kind == .delta && result.changed == 3)
        // Encoded or decoded, depending on whether the HTTP stack decoded gzip itself.
        let received = await replica.lastSyncBytesReceived
        #expect(try received == delta.count || received == GzipDecompressor.decompress(delta).count)
        #expect(try await replica.verify())
        #expect(await replica.count == 40)
        await server.stop()
    }

    @Test func whenTheFullFetchFailsTooThePreviousStateIsKept() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bad = badReply("checksum mismatch")
        let truncatedFull = Array(goodFull.dropLast(20))
        let server = try await ScriptedServer.start { request, _ in
            .init(headers: ["Content-Encoding": "gzip"], body: request.headers["if-none-match"] == nil ? truncatedFull : bad)
        }
        let replica = try makeReplica(dir, url: server.url)
        let outcome = await replica.sync()
        guard case .failed(let reason, let retryAfter) = outcome else { Issue.record("expected failure, got \(outcome)"); return }
        #expect(reason.contains("full body unusable") && retryAfter != nil)
        #expect(await replica.token == "old.1")
        #expect(await replica.count == 40)
        #expect(try await replica.verify())
        #expect(await replica.lastError == reason)
        await server.stop()
    }

    @Test(arguments: [500, 503])
    func serverErrorsKeepTheDataAndHonourRetryAfter(_ status: Int) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try await ScriptedServer.start { _, _ in .init(status: status, headers: ["Retry-After": "120"], body: Array("busy".utf8)) }
        let replica = try makeReplica(dir, url: server.url)
        let now = Date()
        guard case .failed(_, let retryAfter?) = await replica.sync(now: now) else { Issue.record("expected a retryable failure"); return }
        #expect(retryAfter.timeIntervalSince(now) >= 120)
        // Asked again too soon: no request is made.
        #expect(await replica.sync(now: now.addingTimeInterval(60)) == .deferred(until: retryAfter))
        #expect(server.received.count == 1)
        #expect(await replica.count == 40)
        #expect(await replica.token == "old.1")
        #expect(await replica.status == .retrying)
        // After the wait it tries again (and fails again: still bounded, one request).
        _ = await replica.sync(now: retryAfter.addingTimeInterval(1))
        #expect(server.received.count == 2)
        await server.stop()
    }

    @Test func clientErrorsAreReportedNotRetriedBlindly() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try await ScriptedServer.start { _, _ in .init(status: 404, body: Array(#"{"error":"unknown_collection"}"#.utf8)) }
        let replica = try makeReplica(dir, url: server.url)
        guard case .failed(let reason, nil) = await replica.sync() else { Issue.record("expected a non-retryable failure"); return }
        #expect(reason.contains("404"))
        #expect(await replica.count == 40)
        await server.stop()
    }

    @Test func connectionRefusedKeepsTheData() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try await ScriptedServer.start { _, _ in .init() }
        let url = server.url
        await server.stop()
        let replica = try makeReplica(dir, url: url)
        guard case .failed(let reason, _?) = await replica.sync() else { Issue.record("expected a retryable failure"); return }
        #expect(reason.hasPrefix("request failed"))
        #expect(await replica.count == 40)
        #expect(await replica.token == "old.1")
        #expect(try await replica.verify())
    }

    @Test(.timeLimit(.minutes(1)))
    func aServerThatStallsPastTheTimeoutIsAFailureNotAHang() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let full = goodFull
        let server = try await ScriptedServer.start { _, _ in .init(headers: ["Content-Encoding": "gzip"], body: full, delay: .seconds(4)) }
        let replica = try makeReplica(dir, url: server.url, timeout: .milliseconds(500))
        let started = ContinuousClock.now
        guard case .failed = await replica.sync() else { Issue.record("expected a failure"); return }
        #expect(ContinuousClock.now - started < .seconds(3))
        #expect(await replica.count == 40)
        #expect(await replica.token == "old.1")
        await server.stop()
    }

    @Test func validatorsAreSentBackExactlyAsReceived() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let etag = #"W/"opaque; v=1, tag""#
        let lastModified = "not a date, but opaque: 2026-13-45"
        let full = goodFull
        let server = try await ScriptedServer.start { _, index in
            index == 0
                ? .init(headers: ["Content-Encoding": "gzip", "ETag": etag, "Last-Modified": lastModified], body: full)
                : .init(status: 304, headers: [:])
        }
        let replica = try DeltaSnapReplica(path: dir.file("r.sqlite"), collection: "items", url: server.url)
        #expect(await replica.sync().name == "full")
        #expect(await replica.sync() == .notModified)
        let second = try #require(server.received.last)
        #expect(second.headers["if-none-match"] == etag)
        #expect(second.headers["if-modified-since"] == lastModified)
        #expect(server.received.first?.headers["if-none-match"] == nil)
        await server.stop()
    }
}

@Suite struct RetryPolicyTests {
    @Test func backoffGrowsExponentiallyWithinBounds() {
        let policy = RetryPolicy(initialDelay: 5, maximumDelay: 3600, jitter: 0.5)
        #expect(policy.delay(afterFailures: 1, serverAsked: nil, random: 1) == 5)
        #expect(policy.delay(afterFailures: 1, serverAsked: nil, random: 0) == 2.5)
        #expect(policy.delay(afterFailures: 4, serverAsked: nil, random: 1) == 40)
        #expect(policy.delay(afterFailures: 40, serverAsked: nil, random: 1) == 3600)
        #expect(policy.delay(afterFailures: 2, serverAsked: 300, random: 1) == 300)
    }

    @Test func serverDelaysFromRetryAfterAndBackoff() {
        let now = Date(timeIntervalSince1970: 1_000_000)
        #expect(RetryPolicy.serverDelay(retryAfter: "120", backoff: nil, now: now) == 120)
        #expect(RetryPolicy.serverDelay(retryAfter: nil, backoff: "30", now: now) == 30)
        #expect(RetryPolicy.serverDelay(retryAfter: "10", backoff: "30", now: now) == 30)
        #expect(RetryPolicy.serverDelay(retryAfter: HTTPDate.format(1_000_060), backoff: nil, now: now) == 60)
        #expect(RetryPolicy.serverDelay(retryAfter: "soon", backoff: "x", now: now) == nil)
    }
}

/// The ladder as a pure value (``FallbackLadder``), row by row: the same table as the
/// browser client's `ladder.ts` (clients/typescript/test/ladder.test.mjs).
@Suite struct FallbackLadderDecisionTests {
    @Test func eachAnswerToEachStepLeadsWhereTheProtocolSays() {
        #expect(FallbackLadder.decide(.conditional, status: 304) == .notModified)
        #expect(FallbackLadder.decide(.conditional, status: 200) == .apply)
        #expect(FallbackLadder.decide(.full, status: 200) == .apply)
        // A 304 to a request without validators is no answer to it.
        #expect(FallbackLadder.decide(.full, status: 304) == .keep(retryable: false, unavailable: false, reason: "full fetch got status 304"))
        #expect(FallbackLadder.decide(.conditional, status: 503) == .keep(retryable: true, unavailable: true, reason: "server error 503"))
        #expect(FallbackLadder.decide(.conditional, status: 429) == .keep(retryable: true, unavailable: true, reason: "unexpected status 429"))
        #expect(FallbackLadder.decide(.conditional, status: 404) == .keep(retryable: false, unavailable: false, reason: "unexpected status 404"))
        #expect(FallbackLadder.decide(.full, status: 408) == .keep(retryable: true, unavailable: true, reason: "full fetch got status 408"))
        #expect(FallbackLadder.decide(.full, status: 500) == .keep(retryable: true, unavailable: true, reason: "full fetch got status 500"))
    }

    @Test func anUnusableBodyGetsOneFullFetchAndNoMore() {
        #expect(FallbackLadder.afterUnusableBody(.conditional) == .fullFetch)
        #expect(FallbackLadder.afterUnusableBody(.full) == .keep)
        for status in [408, 429, 500, 502, 599] { #expect(FallbackLadder.isUnavailable(status: status)) }
        for status in [200, 304, 400, 401, 404, 410] { #expect(!FallbackLadder.isUnavailable(status: status)) }
    }
}
