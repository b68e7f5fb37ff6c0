import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

/// The CLI as a user runs it: a child process, real files, exit codes and stderr.
@Suite struct ImportCommandTests {
    @Test(arguments: [
        ("{\"id\":\"a\"}\n{\"id\":\"b\"\n", 2, "expected"),
        ("{\"id\":\"a\"}\n\n{\"name\":\"x\"}\n", 3, "no \"id\""),
        ("{\"id\":\"a\"}\n{\"id\":5}\n", 2, "\"id\" must be a string"),
        ("{\"id\":\"a\"}\n{\"id\":\"a\"}\n", 2, "duplicate id \"a\""),
        ("{\"id\":\"a\",\"hidden\":1}\n", 1, "reserved attribute \"hidden\""),
        ("[{\"id\":\"a\"},\n 7]\n", 2, "must be a JSON object"),
        ("{\"id\":\"a\"}\n{\"id\":\"b\\u0000c\"}\n", 2, "must not contain U+0000"),
    ])
    func badInputAbortsWithFileAndLine(_ input: String, _ line: Int, _ reason: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = try dir.write("in.ndjson", input)
        let result = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "c", file])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("deltasnap: \(file):\(line): "), "\(result.stderr)")
        #expect(result.stderr.contains(reason), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    @Test func badLineAtTheEndOfALargeFileLeavesTheStoreExactlyAsItWas() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let seed = try dir.write("seed.ndjson", Fixtures.ndjson(0..<1000))
        #expect(try await CLI.run(["import", "--db", db, "--collection", "c", seed]).status == 0)
        let before = try await CLI.run(["export", "--db", db, "--collection", "c"]).stdoutBytes
        let headBefore = try SQLiteDatabase(path: db).head(of: "c")

        let bad = try dir.write("bad.ndjson", Fixtures.ndjson(0..<100_000, revision: 1) + "{\"id\": oops}\n")
        let result = try await CLI.run(["import", "--db", db, "--collection", "c", "--replace", "--quiet", bad])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("deltasnap: \(bad):100001: "), "\(result.stderr)")
        #expect(try await CLI.run(["export", "--db", db, "--collection", "c"]).stdoutBytes == before)
        #expect(try SQLiteDatabase(path: db).head(of: "c") == headBefore)
    }

    /// A replacing import whose input lost its records (an empty export, a truncated
    /// download) would hide the whole collection: refused, nothing committed.
    /// An input larger than one sorting run (``RecordSorter``, 24 MB) spills to `TMPDIR`; a
    /// full disk there is one line naming the directory and the cause, exit 1, and the store
    /// untouched. The full disk is a real one: a 256 KiB tmpfs (tests run as root, as CI does).
    @Test func aFullSortDirectoryIsOneLineAndNothingIsWritten() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let full = dir.file("small-tmp")
        try FileManager.default.createDirectory(atPath: full, withIntermediateDirectories: true)
        func system(_ arguments: [String]) throws -> Int32 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = arguments
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus
        }
        try #require(try system(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", full]) == 0, "this test mounts a tmpfs: run it as root")
        defer { _ = try? system(["umount", full]) }
        // 130,000 records of ~230 bytes (30 MB), ids out of order (7,919 is prime to 130,000).
        let count = 130_000
        let pad = String(repeating: "x", count: 200)
        let lines = (0..<count).map { #"{"id":"k\#(($0 * 7_919) % count)","pad":"\#(pad)"}"# }
        let input = try dir.write("big.ndjson", lines.joined(separator: "\n") + "\n")
        let db = dir.file("s.sqlite")
        let result = try await CLI.run(["import", "--db", db, "--collection", "c", "--quiet", input], environment: ["TMPDIR": full])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("deltasnap: \(full): cannot write the import's sort file"), "\(result.stderr)")
        #expect(result.stderr.contains("No space left on device") && result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        #expect(try SQLiteDatabase(path: db).head(of: "c") == nil)
    }

    @Test(arguments: ["", "\n\n", "[]", " [ ]\n"])
    func replacingWithNoRecordsIsRefused(_ input: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        #expect(try await CLI.run(["import", "--db", db, "--collection", "c", "-"], stdin: Fixtures.ndjson(0..<3)).status == 0)
        let headBefore = try SQLiteDatabase(path: db).head(of: "c")
        let result = try await CLI.run(["import", "--db", db, "--collection", "c", "--replace", "-"], stdin: input)
        #expect(result.status == 1)
        #expect(result.stderr.contains("would hide every record") && result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        #expect(try SQLiteDatabase(path: db).head(of: "c") == headBefore)
        // Without --replace an empty input is an empty import, as before.
        #expect(try await CLI.run(["import", "--db", db, "--collection", "c", "-"], stdin: input).status == 0)
    }

    @Test func importsAJSONArrayFromStandardInput() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "c", "-"],
                                 stdin: #"[{"id":"b","x":1},{"id":"a"}]"#)
        #expect(result.status == 0, "\(result.stderr)")
        let export = try await CLI.run(["export", "--db", dir.file("s.sqlite"), "--collection", "c"])
        #expect(export.stdout == "{\"id\":\"a\"}\n{\"id\":\"b\",\"x\":1}\n")
    }

    @Test func usageErrorsAreOneLineAndNonZero() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let badName = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "Bad Name", "-"], stdin: "")
        #expect(badName.status == 1 && badName.stderr.contains("invalid collection name"))
        let missing = try await CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "c", dir.file("nope.ndjson")])
        #expect(missing.status == 1 && missing.stderr.contains("does not exist"))
        let unknown = try await CLI.run(["export", "--db", dir.file("s.sqlite"), "--collection", "nope"])
        #expect(unknown.status == 1 && unknown.stderr.contains("does not exist"))
    }

    @Test func concurrentImporterProcessesNeverDuplicateOrReorderVersions() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        _ = try SQLiteDatabase(path: db)  // create the schema once, up front
        let writers = 4
        let importsEach = 5
        let results = try (0..<writers).map { writer in
            try (0..<importsEach).map { round in
                try dir.write("w\(writer)-\(round).ndjson", Fixtures.ndjson((writer * 1000 + round * 10)..<(writer * 1000 + round * 10 + 10)))
            }
        }
        let group = DispatchGroup()
        let outputs = Locked<[CLI.Result]>([])
        for files in results {
            DispatchQueue.global().async(group: group) {
                for file in files {
                    let result = try? CLI.runBlocking(["import", "--db", db, "--collection", "c", "--quiet", file])
                    outputs.withLock { $0.append(result ?? CLI.Result(status: -1, stdout: "", stderr: "spawn failed", stdoutBytes: [])) }
                }
            }
        }
        // Waited for without holding a thread of the cooperative pool.
        await withCheckedContinuation { done in group.notify(queue: .global()) { done.resume() } }
        let all = outputs.withLock { $0 }
        #expect(all.count == writers * importsEach)
        #expect(all.allSatisfy { $0.status == 0 }, "\(all.map(\.stderr))")
        // Each import reports its own version: 1...20, each exactly once.
        let versions = all.compactMap { result in
            result.stdout.split(separator: " ").firstIndex(of: "version").map { Int(result.stdout.split(separator: " ")[$0 + 1])! }
        }
        #expect(versions.sorted() == Array(1...(writers * importsEach)))
        let store = try SQLiteDatabase(path: db)
        #expect(try store.head(of: "c")?.version == UInt64(writers * importsEach))
        #expect(try store.head(of: "c")?.count == writers * importsEach * 10)
        #expect(try store.read { try $0.recomputedChecksum(of: "c") }.checksum == store.head(of: "c")?.checksum)
    }
}

extension ImportCommandTests {
    /// `import --rules FILE` into the memberships collection: every record that would grant
    /// nothing is named (FILE:LINE), and nothing is imported; other collections pass as before.
    @Test func membershipsThatGrantNothingAreRefusedWithTheirLines() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let rules = try dir.write("rules.yaml", Fixtures.studyAppRules)
        let bad = #"{"id":"sets/1","role":"read"}"# + "\n" + #"{"id":"sets/2","role":"none"}"# + "\n"
            + #"{"id":"sets/3"}"# + "\n" + #"{"id":"plain","role":"write"}"# + "\n" + #"{"id":"sets/4","hidden":true}"# + "\n"
        let file = try dir.write("members.ndjson", bad)
        for arguments in [
            ["import", "--db", db, "--rules", rules, "--collection", "members/alice", file],
            ["import", "--db", db, "--rules", rules, "--collection", "members", "--partition-by", "user", try dir.write("by-user.ndjson", #"{"id":"sets/9","user":"bob","role":"Write"}"# + "\n")],
        ] {
            let result = try await CLI.run(arguments)
            #expect(result.status == 1, "\(result.stderr)")
            #expect(!result.stderr.contains("deltasnap: ") || result.stderr.hasSuffix("nothing was imported\n"), "\(result.stderr)")
        }
        let refused = try await CLI.run(["import", "--db", db, "--rules", rules, "--collection", "members/alice", file])
        let lines = refused.stderr.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(refused.stderr)")
        #expect(lines[0].hasPrefix("\(file):2: record \"sets/2\": role \"none\" grants nothing"), "\(lines[0])")
        #expect(lines[1].hasPrefix("\(file):3: record \"sets/3\": no role grants nothing"), "\(lines[1])")
        #expect(lines[2].hasPrefix("\(file):4: record \"plain\": a membership's id names a partition"), "\(lines[2])")
        #expect(lines[3] == "deltasnap: 3 membership records would grant nothing; nothing was imported")
        #expect(try SQLiteDatabase(path: db).head(of: "members/alice") == nil)

        // From standard input too; good records import; other collections are not checked.
        let good = try await CLI.run(["import", "--db", db, "--rules", rules, "--collection", "members/alice", "-"], stdin: #"{"id":"sets/1","role":"read"}"#)
        #expect(good.status == 0, "\(good.stderr)")
        let stdinBad = try await CLI.run(["import", "--db", db, "--rules", rules, "--collection", "members/alice", "-"], stdin: #"{"id":"sets/1","role":1}"#)
        #expect(stdinBad.status == 1 && stdinBad.stderr.hasPrefix("<stdin>:1: record \"sets/1\": role 1 grants nothing"), "\(stdinBad.stderr)")
        let other = try await CLI.run(["import", "--db", db, "--rules", rules, "--collection", "sets/1", "-"], stdin: #"{"id":"q","role":"none"}"#)
        #expect(other.status == 0, "\(other.stderr)")
    }

    /// PROTOCOL §10.1: `--partition-by` keeps the field in each record; `export` of a
    /// partition that does not exist fails with one line.
    @Test func partitionByKeepsTheFieldAndExportOfAMissingPartitionFails() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let file = try dir.write("a.ndjson", #"{"id":"a1","owner":"alice","score":3}"# + "\n")
        #expect(try await CLI.run(["import", "--db", db, "--collection", "attempts", "--partition-by", "owner", file]).status == 0)
        let exported = try await CLI.run(["export", "--db", db, "--collection", "attempts/alice"])
        #expect(exported.stdout == #"{"id":"a1","owner":"alice","score":3}"# + "\n")
        let missing = try await CLI.run(["export", "--db", db, "--collection", "attempts/zed"])
        #expect(missing.status == 1 && missing.stderr == "deltasnap: collection \"attempts/zed\" does not exist\n", "\(missing.stderr)")
    }
}
