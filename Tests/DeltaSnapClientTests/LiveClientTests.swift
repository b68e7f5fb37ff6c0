@testable import DeltaSnapClient
import DeltaSnapCore
@testable import DeltaSnapServer
import DeltaSnapTestSupport
import Foundation
import Testing

/// Live mode (docs/CLIENT.md): a replica, a view and `deltasnap sync --watch --live` learn
/// of a commit while they wait on a real server on 127.0.0.1, and stop when told.
@Suite struct LiveClientTests {
    /// Polls `condition` every 50 ms for at most `seconds` (the shared ``eventually(within:every:_:)``).
    static func eventually(within seconds: Double, _ condition: () async throws -> Bool) async throws -> Bool {
        try await DeltaSnapTestSupport.eventually(within: .milliseconds(Int(seconds * 1000)), every: .milliseconds(50), condition)
    }

    static func put(_ server: TestServer, _ path: String, _ json: String) async throws {
        let response = try await server.adminPut(path, json)
        #expect(response.status == 200, "\(response.text)")
    }

    /// A server on a store holding `countries` (one record), stopped after `body`.
    static func withCountries(_ body: (TestServer, TemporaryDirectory) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(.sqlite, in: dir)
        try await store.importText(#"{"id":"AD","name":"Andorra"}"#, collection: "countries")
        let server = try await TestServer.start(database: store.url)
        do { try await server.stopping { try await body(server, dir) } } catch {
            await store.stop()
            throw error
        }
        await store.stop()
    }

    @Test func aLiveReplicaHasACommitAppliedWithinMomentsAndStopsWhenCancelled() async throws {
        try await Self.withCountries { server, dir in
            let replica = try DeltaSnapReplica(
                path: dir.file("r.sqlite"), collection: "countries", url: URL(string: "\(server.baseURL)/v1/collections/countries")!)
            let outcomes = Locked<[String]>([])
            let live = Task { await replica.live(LiveOptions(wait: 20)) { outcome in outcomes.withLock { $0.append(outcome.name) } } }
            #expect(try await Self.eventually(within: 10) { await replica.count == 1 })
            // Now waiting on the server (its held request registered): a commit shows up
            // without a poll interval.
            #expect(try await Self.eventually(within: 10) { server.service.waiters.count >= 1 })
            let committed = Date()
            try await Self.put(server, "/v1/collections/countries/records/FR", #"{"name":"France"}"#)
            #expect(try await Self.eventually(within: 10) { try await replica.record(id: "FR") != nil })
            let latency = Date().timeIntervalSince(committed)
            #expect(latency < 5, "commit to applied: \(latency) s")
            let stopping = Date()
            live.cancel()
            await live.value
            #expect(Date().timeIntervalSince(stopping) < 5, "a cancelled live replica must stop at once")
            #expect(outcomes.current.contains("delta"), "\(outcomes.current)")
        }
    }

    /// Live queries across live mode (issue 47): each commit that reaches the waiting replica
    /// is one new result for its observer, nothing else is.
    @Test func anObservedQueryFollowsALiveReplica() async throws {
        try await Self.withCountries { server, dir in
            let replica = try DeltaSnapReplica(
                path: dir.file("r.sqlite"), collection: "countries", url: URL(string: "\(server.baseURL)/v1/collections/countries")!)
            await replica.sync()
            let byName = LiveQueryTests.Seen(try await replica.observe(ReplicaQuery().order(by: "name")))
            try await byName.waitFor(1)
            let live = Task { await replica.live(LiveOptions(wait: 20)) { _ in } }
            // Waiting on the server (its held request registered): a commit wakes it.
            #expect(try await Self.eventually(within: 10) { server.service.waiters.count >= 1 })
            try await Self.put(server, "/v1/collections/countries/records/FR", #"{"name":"France"}"#)
            #expect(try await Self.eventually(within: 10) { byName.count == 2 })
            try await Self.put(server, "/v1/collections/countries/records/BE", #"{"name":"Belgium"}"#)
            #expect(try await Self.eventually(within: 10) { byName.count == 3 })
            #expect(LiveQueryTests.ids(byName.last) == ["AD", "BE", "FR"])
            live.cancel()
            await live.value
            #expect(await replica.observationCounts.notifications == 2)
        }
    }

    @Test func aLiveViewPullsItsUsersPartitionWhenItChanges() async throws {
        try await ViewSyncTests().withServer { f in
            let alice = try await f.view("alice")
            // Observed before anything is on the device: the view's live mode fills it.
            let attempts = LiveQueryTests.Seen(try await alice.observe("attempts", ReplicaQuery().order(by: "score")))
            let reports = Locked(0)
            let live = Task { await alice.live(LiveOptions(wait: 20)) { _ in reports.withLock { $0 += 1 } } }
            // The first sync, backed off if the whole suite's load makes it time out.
            #expect(try await Self.eventually(within: 30) { try await alice.partitions().count == 4 })
            // Waiting on the server (its held request registered): a commit wakes it.
            #expect(try await Self.eventually(within: 10) { f.server.service.waiters.count >= 1 })
            try await Self.put(f.server, "/v1/collections/attempts/partitions/alice/records/a2", #"{"score":9}"#)
            #expect(try await Self.eventually(within: 10) { try f.dump("alice", "attempts/alice").contains(#""a2""#) })
            #expect(try await Self.eventually(within: 10) { LiveQueryTests.ids(attempts.last) == ["a1", "a2"] })
            // A membership granted while waiting moves the partition in.
            try await f.setMembership("alice", "sets/9000", role: "read")
            #expect(try await Self.eventually(within: 10) { try await alice.partitions().contains("sets/9000") })
            live.cancel()
            await live.value
            #expect(reports.current >= 3)
        }
    }

    @Test func syncWatchLivePrintsALinePerChangeAsItArrives() async throws {
        try await Self.withCountries { server, dir in
            // Output to a file, read as it grows: no pipe and no reading thread to outlive the test.
            let outputPath = dir.file("live.out")
            let process = try Spawned(
                CLI.binary,
                ["sync", "--url", "\(server.baseURL)/v1/collections/countries", "--replica", dir.file("r.sqlite"), "--watch", "--live", "--wait", "20"],
                stdout: .file(outputPath), stderr: .discard)
            defer { process.killNow() }
            let lines = LinesOfFile(path: outputPath)
            #expect(try await Self.eventually(within: 10) { lines.current.count == 1 })
            #expect(lines.current.first?.hasPrefix("pulled: full ") == true, "\(lines.current)")
            for (index, code) in ["FR", "BE"].enumerated() {
                // Waiting on the server (its held request registered): a commit wakes it.
                #expect(try await Self.eventually(within: 10) { server.service.waiters.count >= 1 })
                try await Self.put(server, "/v1/collections/countries/records/\(code)", #"{"name":"\#(code)"}"#)
                #expect(try await Self.eventually(within: 10) { lines.current.count == index + 2 }, "\(lines.current)")
                #expect(lines.current.last?.hasPrefix("pulled: delta ") == true && lines.current.last?.contains("changed=1") == true)
            }
            process.signal(SIGINT)
            await process.wait(atMost: 10)
        }
    }

    /// The complete lines of a file another process appends to, read again on each access.
    struct LinesOfFile {
        let path: String

        var current: [String] {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        }
    }

    @Test func heldRequestsCutByAProxyShortenTheWaitDownToPolling() {
        var loop = LiveLoop(options: LiveOptions(wait: 30, pollInterval: .seconds(7), maximumBackoff: .seconds(60)))
        #expect(loop.wait == 30)
        // Cut after 10 s of a 30 s wait: wait 5 s from now on, at once.
        #expect(loop.pause(after: .failed, held: .seconds(10)) == .zero && loop.wait == 5)
        #expect(loop.pause(after: .unchanged, held: .seconds(5)) == .zero)
        // Cut after 1.5 s: plain polling every pollInterval.
        #expect(loop.pause(after: .failed, held: .milliseconds(1_500)) == .zero && loop.wait == nil)
        #expect(loop.pause(after: .unchanged, held: .milliseconds(5)) == .seconds(7))
        // Failures at once (no server) back off, doubling up to the cap.
        #expect(loop.pause(after: .failed, held: .milliseconds(2)) == .seconds(1))
        #expect(loop.pause(after: .failed, held: .milliseconds(2)) == .seconds(2))
        #expect(loop.pause(after: .failed, held: .milliseconds(2)) == .seconds(4))
        for _ in 0..<10 { _ = loop.pause(after: .failed, held: .milliseconds(2)) }
        #expect(loop.pause(after: .failed, held: .milliseconds(2)) == .seconds(60))
        let until = Date().addingTimeInterval(3)
        #expect(loop.pause(after: .deferred(until: until), held: .zero, now: until.addingTimeInterval(-3)) == .seconds(3))
        // A fast failure does not shorten a wait.
        var fresh = LiveLoop(options: LiveOptions(wait: 30))
        #expect(fresh.pause(after: .failed, held: .milliseconds(20)) == .seconds(1) && fresh.wait == 30)
    }
}
