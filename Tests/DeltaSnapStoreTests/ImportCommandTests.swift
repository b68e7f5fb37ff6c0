import DeltaSnapCore
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
    func badInputAbortsWithFileAndLine(_ input: String, _ line: Int, _ reason: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = try dir.write("in.ndjson", input)
        let result = try CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "c", file])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("deltasnap: \(file):\(line): "), "\(result.stderr)")
        #expect(result.stderr.contains(reason), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    @Test func badLineAtTheEndOfALargeFileLeavesTheStoreExactlyAsItWas() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let seed = try dir.write("seed.ndjson", Fixtures.ndjson(0..<1000))
        #expect(try CLI.run(["import", "--db", db, "--collection", "c", seed]).status == 0)
        let before = try CLI.run(["export", "--db", db, "--collection", "c"]).stdoutBytes
        let headBefore = try Store(path: db).head(of: "c")

        let bad = try dir.write("bad.ndjson", Fixtures.ndjson(0..<100_000, revision: 1) + "{\"id\": oops}\n")
        let result = try CLI.run(["import", "--db", db, "--collection", "c", "--replace", "--quiet", bad])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("deltasnap: \(bad):100001: "), "\(result.stderr)")
        #expect(try CLI.run(["export", "--db", db, "--collection", "c"]).stdoutBytes == before)
        #expect(try Store(path: db).head(of: "c") == headBefore)
    }

    /// A replacing import whose input lost its records (an empty export, a truncated
    /// download) would hide the whole collection: refused, nothing committed.
    @Test(arguments: ["", "\n\n", "[]", " [ ]\n"])
    func replacingWithNoRecordsIsRefused(_ input: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        #expect(try CLI.run(["import", "--db", db, "--collection", "c", "-"], stdin: Fixtures.ndjson(0..<3)).status == 0)
        let headBefore = try Store(path: db).head(of: "c")
        let result = try CLI.run(["import", "--db", db, "--collection", "c", "--replace", "-"], stdin: input)
        #expect(result.status == 1)
        #expect(result.stderr.contains("would hide every record") && result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        #expect(try Store(path: db).head(of: "c") == headBefore)
        // Without --replace an empty input is an empty import, as before.
        #expect(try CLI.run(["import", "--db", db, "--collection", "c", "-"], stdin: input).status == 0)
    }

    @Test func importsAJSONArrayFromStandardInput() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "c", "-"],
                                 stdin: #"[{"id":"b","x":1},{"id":"a"}]"#)
        #expect(result.status == 0, "\(result.stderr)")
        let export = try CLI.run(["export", "--db", dir.file("s.sqlite"), "--collection", "c"])
        #expect(export.stdout == "{\"id\":\"a\"}\n{\"id\":\"b\",\"x\":1}\n")
    }

    @Test func usageErrorsAreOneLineAndNonZero() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let badName = try CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "Bad Name", "-"], stdin: "")
        #expect(badName.status == 1 && badName.stderr.contains("invalid collection name"))
        let missing = try CLI.run(["import", "--db", dir.file("s.sqlite"), "--collection", "c", dir.file("nope.ndjson")])
        #expect(missing.status == 1 && missing.stderr.contains("does not exist"))
        let unknown = try CLI.run(["export", "--db", dir.file("s.sqlite"), "--collection", "nope"])
        #expect(unknown.status == 1 && unknown.stderr.contains("does not exist"))
    }

    @Test func concurrentImporterProcessesNeverDuplicateOrReorderVersions() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        _ = try Store(path: db)  // create the schema once, up front
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
                    let result = try? CLI.run(["import", "--db", db, "--collection", "c", "--quiet", file])
                    outputs.withLock { $0.append(result ?? CLI.Result(status: -1, stdout: "", stderr: "spawn failed", stdoutBytes: [])) }
                }
            }
        }
        group.wait()
        let all = outputs.withLock { $0 }
        #expect(all.count == writers * importsEach)
        #expect(all.allSatisfy { $0.status == 0 }, "\(all.map(\.stderr))")
        // Each import reports its own version: 1...20, each exactly once.
        let versions = all.compactMap { result in
            result.stdout.split(separator: " ").firstIndex(of: "version").map { Int(result.stdout.split(separator: " ")[$0 + 1])! }
        }
        #expect(versions.sorted() == Array(1...(writers * importsEach)))
        let store = try Store(path: db)
        #expect(try store.head(of: "c")?.version == UInt64(writers * importsEach))
        #expect(try store.head(of: "c")?.count == writers * importsEach * 10)
        #expect(try store.read { try $0.recomputedChecksum(of: "c") }.checksum == store.head(of: "c")?.checksum)
    }
}
