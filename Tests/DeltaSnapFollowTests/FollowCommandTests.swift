import Crypto
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTestSupport
import Foundation
import Testing

/// `deltasnap follow` as an operator runs it: a child process against a real source,
/// SIGKILLed at random moments, its slot reported and dropped.
@Suite struct FollowCommandTests {
    /// A row with `values` copied by a new follower (id 1), then the same values streamed (id
    /// 2), from a real source whose `table` `creating` makes: both records as the store keeps
    /// them — the copy and the stream must map a value the same way.
    static func copiedAndStreamed(table: String, creating: [String], values: String) async throws -> (copied: String, streamed: String) {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = try await SourceDatabase.start(in: dir)
        defer { Task { await source.stop() } }
        for statement in creating { try await source.run(statement) }
        try await source.run("INSERT INTO \(table) VALUES (1, \(values))")
        let db = dir.file("s.sqlite")
        let follower = try Follower(["--source", source.url, "--db", db, "--table", table, "--create"], output: dir.file("f.log"))
        try await follower.waitFor("copy: ")
        try await source.run("INSERT INTO \(table) VALUES (2, \(values))")
        try await follower.waitFor("\(table): version 2")
        await follower.kill(SIGTERM)
        let store = try await StoreLocation(db).open(configuration: StoreConfiguration())
        let records = (try await store.record("1", in: table), try await store.record("2", in: table))
        await store.close()
        return (try #require(records.0).text, try #require(records.1).text)
    }

    /// A running `deltasnap follow` (or another long-running verb), its output in a file.
    final class Follower: @unchecked Sendable {
        let process: Spawned
        let output: String
        private let command: [String]

        init(_ arguments: [String], output: String, command: [String] = ["follow"], executable: String = CLI.binary) throws {
            self.output = output
            self.command = command + arguments
            process = try Spawned(executable, command + arguments, stdout: .appending(output), stderr: .appending(output))
        }

        /// Sends `signal`; a process still there 10 s later is killed outright (never a hung
        /// test). Its exit status (128 + the signal when one ended it).
        /// SIGKILL and reap at once (for a `defer`, which cannot await).
        func killNow() { process.killNow() }

        @discardableResult
        func kill(_ signal: Int32) async -> Int32 {
            process.signal(signal)
            let deadline = ContinuousClock.now + .seconds(10)
            while process.isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
            if process.isRunning { Issue.record("\(command) ignored signal \(signal)") }
            return await process.wait(atMost: 0)
        }

        var text: String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }

        /// Waits (up to 30 s) for `line` in its output.
        func waitFor(_ line: String) async throws {
            let came = try await eventually(within: .seconds(30), every: .milliseconds(50)) { text.contains(line) }
            if !came { Issue.record("\(line) never came: \(text)") }
        }
    }

    static func number(_ name: String, default value: Int) -> Int {
        ProcessInfo.processInfo.environment[name].flatMap(Int.init) ?? value
    }

    /// The MD5 of `id:v:note` per row, one line each in id order: the table's whole state,
    /// however it was read (PostgreSQL computes the source's).
    static func state(of rows: [(id: Int, v: String, note: String)]) -> String {
        let text = rows.sorted { $0.id < $1.id }.map { "\($0.id):\($0.v):\($0.note)" }.joined(separator: "\n")
        return Insecure.MD5.hash(data: Array(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    static func sourceState(_ source: SourceDatabase) async throws -> String {
        try await source.rows("""
            SELECT md5(coalesce(string_agg(id::text || ':' || v::text || ':' || coalesce(note, 'null'), E'\\n' ORDER BY id), '')) FROM items
            """)[0][0]!
    }

    /// The published version and its state, read in one store transaction (a head read apart
    /// from the records may name the version before theirs).
    static func publishedState(_ store: any CollectionStore) async throws -> (version: UInt64, state: String)? {
        guard try await store.head(of: "items") != nil else { return nil }
        return try await store.withRecords(in: "items") { source in
            var rows: [(Int, String, String)] = []
            while try await source.next({ bytes in
                let value = try JSONReader(bytes: Array(bytes)).readValue()
                guard case .string(let id)? = value["id"], case .number(let v)? = value["v"] else { return }
                let note: String = if case .string(let text)? = value["note"] { text } else { "null" }
                rows.append((Int(id)!, v, note))
            }) {}
            return (source.head.version, state(of: rows))
        }
    }

    /// The source table's state after each commit, as the store's checksum of the records it
    /// maps to (a sum of XXH64s: docs/PROTOCOL.md §3), kept by re-reading only the rows a
    /// transaction touches — so a state per commit of 10,000 over a 100,000-row table costs
    /// what the transactions cost, and a published version's state is its head's checksum.
    struct SourceChecksum {
        var value = StateChecksum.empty

        static func record(_ row: [String?]) throws -> Record {
            try Record(parsing: .object([JSONMember("id", .string(row[0]!)), JSONMember("note", row[2].map(JSONValue.string) ?? .null), JSONMember("v", .number(row[1]!))]))
        }

        static func rows(_ ids: [Int]?, in source: SourceDatabase) async throws -> [Record] {
            let filter = ids.map { " WHERE id = ANY('{\($0.map(String.init).joined(separator: ","))}'::int[])" } ?? ""
            return try await source.rows("SELECT id::text, v::text, note FROM items" + filter).map(record)
        }

        static func read(_ source: SourceDatabase) async throws -> SourceChecksum {
            var checksum = SourceChecksum()
            for record in try await rows(nil, in: source) { checksum.value.add(record) }
            return checksum
        }

        /// Runs `statements` as one transaction (the only writer) and moves the checksum by the rows `ids` before and after.
        mutating func apply(_ statements: [String], touching ids: [Int], on source: SourceDatabase) async throws {
            let before = try await Self.rows(ids, in: source)
            try await source.transaction(statements)
            for record in before { value.remove(record) }
            for record in try await Self.rows(ids, in: source) { value.add(record) }
        }
    }

    /// Into each store: the SQLite file, and DeltaSnap's PostgreSQL store in a database of its
    /// own on the source's server (its batches merged set-based).
    @Test(arguments: TestBackend.allCases) func aFollowerKilledAtAnyMomentPublishesOnlyStatesTheSourceHad(_ backend: TestBackend) async throws {
        let kills = Self.number("DELTASNAP_FOLLOW_KILLS", default: 8)
        let transactions = Self.number("DELTASNAP_FOLLOW_TRANSACTIONS", default: 400)
        let rows = Self.number("DELTASNAP_FOLLOW_ROWS", default: 2_000)
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = try await SourceDatabase.start(in: dir)
        defer { Task { await source.stop() } }
        try await source.run("CREATE TABLE items(id int PRIMARY KEY, v int NOT NULL, note text)")
        try await source.run("INSERT INTO items SELECT i, i, 'row ' || i FROM generate_series(1, \(rows)) AS i")
        try await source.run("CREATE TABLE scores(user_id text, id int, v int, PRIMARY KEY(user_id, id))")
        try await source.run("INSERT INTO scores SELECT 'u' || (i % 7), i, 0 FROM generate_series(1, 200) AS i")
        let db: String
        if backend == .sqlite {
            db = dir.file("s.sqlite")
        } else {
            try await source.run("CREATE DATABASE store")
            db = source.url.replacingOccurrences(of: "/postgres", with: "/store")
        }
        // Transactions of more than 10 rows are staged in a file: killed then too.
        let arguments = [
            "--source", source.url, "--db", db, "--table", "public.items", "--table", "scores", "--partition-by", "user_id", "--create", "--spill-rows", "10",
        ]
        let log = dir.file("follow.log")
        // Every state the table had, each taken right after its commit (one writer).
        let initial = try await SourceChecksum.read(source)
        var sourceStates: Set<UInt64> = [initial.value.value]
        var follower = try Follower(arguments, output: log)
        let progress = Locked(0)
        let written = Task {
            var random = SystemRandomNumberGenerator()
            var table = initial
            var states: [UInt64] = []
            var next = rows + 1
            for index in 0..<transactions {
                let id = Int.random(in: 1...rows, using: &random)
                let statements: [String]
                let touched: [Int]
                switch index % 6 {
                case 0: (statements, touched) = (["UPDATE items SET v = v + 1 WHERE id = \(id)"], [id])
                case 1: (statements, touched) = (["UPDATE items SET v = v * 2, note = 'n\(index)' WHERE id BETWEEN \(id) AND \(id + 9)"], Array(id...id + 9))
                case 2: (statements, touched) = (["INSERT INTO items VALUES (\(next), \(index), NULL)"], [next]); next += 1
                case 3: (statements, touched) = (["DELETE FROM items WHERE id = \(id)", "UPDATE items SET note = NULL WHERE id = \(id + 1)"], [id, id + 1])
                case 4:
                    (statements, touched) = (["UPDATE scores SET user_id = 'u\(index % 5)', v = \(index) WHERE id = \(id % 200 + 1)", "UPDATE items SET v = -v WHERE id = \(id)"], [id])
                default:
                    statements = ["INSERT INTO items VALUES (\(next), 0, 'x') ON CONFLICT (id) DO NOTHING", "UPDATE items SET v = 7 WHERE id % 97 = \(index % 97)"]
                    touched = [next] + (1..<next).filter { $0 % 97 == index % 97 }
                    next += 1
                }
                try await table.apply(statements, touching: touched, on: source)
                states.append(table.value.value)
                progress.withLock { $0 = index + 1 }
                // Paced so the writes span the kills (the copy's included), as an app's would.
                try await Task.sleep(for: .milliseconds(8))
            }
            return states
        }
        // Meanwhile: the follower killed at random moments (the copy included) and started
        // again; the published states read as a client would, between kills.
        try await follower.waitFor("replication slot deltasnap created")
        let store = try await StoreLocation(db).open(configuration: StoreConfiguration(), readOnly: backend == .sqlite)
        // (version, checksum) as a client reads the head: one read, whatever the table's size.
        var observed: [(UInt64, UInt64)] = []
        func observe() async {
            if let head = try? await store.head(of: "items") { observed.append((head.version, head.checksum.value)) }
        }
        // Kills spread over the writes (the first one early: during the copy), at least 50 ms apart.
        let giveUp = Date().addingTimeInterval(1200)
        for kill in 0..<kills {
            let due = kill * transactions / kills + Int.random(in: 0...max(0, transactions / kills / 2))
            let earliest = Date().addingTimeInterval(0.05)
            while (progress.withLock { $0 } < min(due, transactions) && Date() < giveUp) || Date() < earliest {
                await observe()
                try await Task.sleep(for: .milliseconds(15))
            }
            await follower.kill(SIGKILL)
            follower = try Follower(arguments, output: log)
        }
        let states = try await written.value
        sourceStates.formUnion(states)
        var caughtUp = false
        for _ in 0..<600 {
            await observe()
            if observed.last?.1 == states.last ?? initial.value.value { caughtUp = true; break }
            try await Task.sleep(for: .milliseconds(50))
        }
        await follower.kill(SIGTERM)
        #expect(caughtUp, "the follower never caught up: \(follower.text.suffix(2000))")
        // The export is the table's rows, byte for byte as the records map them.
        let published = try await Self.publishedState(store)
        #expect(published?.state == (try await Self.sourceState(source)))
        #expect(published?.version == observed.last?.0)
        #expect(follower.text.contains("copy: more than 10 rows, staged in a temporary file"))
        #expect(follower.text.contains("rows, staged in a temporary file until its commit"))
        // Every version a client could read was the table at one source commit.
        let strangers = observed.filter { !sourceStates.contains($0.1) }
        #expect(strangers.isEmpty, "versions \(strangers.map(\.0)) were never a state of the source")
        // A version, once published, never changes.
        let changed = Dictionary(grouping: observed, by: \.0).filter { Set($0.value.map(\.1)).count > 1 }.keys
        #expect(changed.isEmpty, "versions \(changed.sorted()) were published with two states")
        #expect(Set(observed.map(\.0)).count > 2)
        // The partitioned table ends as the source's rows, each in its user's partition.
        var expected: [String: Set<String>] = [:]
        for row in try await source.rows("SELECT user_id, id::text, v::text FROM scores") { expected["scores/" + row[0]!, default: []].insert(row[1]! + ":" + row[2]!) }
        for path in try await store.partitions(of: "scores") {
            var out: [UInt8] = []
            try await store.export(path) { out += $0 }
            let got = Set(try out.split(separator: UInt8(ascii: "\n")).map { line -> String in
                let value = try JSONReader(bytes: Array(line)).readValue()
                guard case .string(let id)? = value["id"], case .number(let v)? = value["v"] else { return "?" }
                return id + ":" + v
            })
            #expect(got == expected[path] ?? [], "\(path)")
        }
        await store.close()
    }

    @Test func aStoppedFollowersSlotReportsItsLagAndIsDropped() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = try await SourceDatabase.start(in: dir)
        defer { Task { await source.stop() } }
        try await source.run("CREATE TABLE items(id int PRIMARY KEY, v int)")
        let db = dir.file("s.sqlite")
        let arguments = ["--source", source.url, "--db", db, "--table", "items", "--max-lag-bytes", "100000"]
        // Without --create nothing is made: the error says what to run.
        let refused = try await CLI.run(["follow"] + arguments)
        #expect(refused.status == 1 && refused.stderr.contains("CREATE PUBLICATION"), "\(refused.stderr)")
        var follower = try Follower(arguments + ["--create"], output: dir.file("a.log"))
        try await follower.waitFor("copy: ")
        await follower.kill(SIGTERM)
        // While it is stopped the source keeps writing: the slot holds that WAL back.
        try await source.run("INSERT INTO items SELECT i, i FROM generate_series(1, 20000) AS i")
        follower = try Follower(arguments + ["--metrics-listen", "127.0.0.1:0"], output: dir.file("b.log"))
        var reported = false
        for _ in 0..<200 where !reported {
            reported = follower.text.contains("holds back")
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(reported, "\(follower.text)")
        // …and so does its gauge, on the metrics listener.
        try await follower.waitFor("deltasnap: metrics on http://127.0.0.1:")
        let line = try #require(follower.text.split(separator: "\n").first { $0.hasPrefix("deltasnap: metrics on http://127.0.0.1:") })
        let port = try #require(Int(line.split(separator: ":").last!.prefix { $0.isNumber }))
        let metrics = try await RawHTTPClient(port: port).request("GET", "/metrics")
        #expect(metrics.status == 200 && metrics.text.contains("deltasnap_follow_slot_lag_bytes"), "\(metrics.text)")
        // Nothing else is there, and it says so as the API does.
        let other = try await RawHTTPClient(port: port).request("GET", "/v1/collections/items")
        #expect(other.status == 404 && other.text.contains(#""error":"not_found""#), "\(other.text)")
        await follower.kill(SIGTERM)
        // --drop-slot removes it (and the position), and says so.
        let dropped = try await CLI.run(["follow", "--source", source.url, "--db", db, "--drop-slot"])
        #expect(dropped.status == 0 && dropped.stdout == "slot deltasnap dropped\n", "\(dropped.stderr)")
        #expect(try await source.rows("SELECT slot_name FROM pg_replication_slots").isEmpty)
        let again = try await CLI.run(["follow", "--source", source.url, "--db", db, "--drop-slot"])
        #expect(again.stdout == "slot deltasnap did not exist\n")
    }

    @Test func aLiveClientSeesASourceCommit() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = try await SourceDatabase.start(in: dir)
        defer { Task { await source.stop() } }
        try await source.run("CREATE TABLE countries(code text PRIMARY KEY, name text)")
        try await source.run("INSERT INTO countries VALUES ('AD', 'Andorra')")
        let db = dir.file("s.sqlite")
        let follower = try Follower(["--source", source.url, "--db", db, "--table", "countries", "--create"], output: dir.file("follow.log"))
        defer { follower.killNow() }
        try await follower.waitFor("copy: ")
        let server = try await ServeProcess.start(["--db", db])
        defer { server.stop() }
        let client = try Follower([], output: dir.file("client.log"), command: [
            "sync", "--url", "\(server.collectionsURL)/countries", "--replica", dir.file("r.sqlite"), "--watch", "--live", "--wait", "20",
        ])
        defer { client.killNow() }
        try await client.waitFor("pulled: full ")
        try await source.run("INSERT INTO countries VALUES ('BE', 'Belgium')")
        try await client.waitFor("pulled: delta ")
        #expect(client.text.contains("changed=1"), "\(client.text)")
        #expect(try await CLI.run(["dump", "--replica", dir.file("r.sqlite")]).stdout.contains(#"{"code":"BE","id":"BE","name":"Belgium"}"#))
    }

    @Test func badOptionsAreRefusedWithOneLine() async throws {
        let usage = try await CLI.run(["follow", "--source", "postgres://u@127.0.0.1:1/db", "--db", "/tmp/x.sqlite", "--partition-by", "user_id", "--table", "t"])
        #expect(usage.status == 2 && usage.stderr.contains("--partition-by user_id must follow the --table"), "\(usage.stderr)")
        let noTable = try await CLI.run(["follow", "--source", "postgres://u@127.0.0.1:1/db", "--db", "/tmp/x.sqlite"])
        #expect(noTable.status == 2 && noTable.stderr.contains("--table"))
        let unreachable = try await CLI.run(["follow", "--source", "postgres://u@127.0.0.1:1/db", "--db", "/tmp/follow-unreachable.sqlite", "--table", "t"])
        #expect(unreachable.status == 1 && unreachable.stderr.contains("cannot reach the source"), "\(unreachable.stderr)")
        // One line, saying what the connection met, not postgres-nio's dump of the error.
        #expect(unreachable.stderr.split(separator: "\n").count == 1 && !unreachable.stderr.contains("PSQLError"), "\(unreachable.stderr)")
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: "/tmp/follow-unreachable.sqlite" + suffix) }
    }
}
