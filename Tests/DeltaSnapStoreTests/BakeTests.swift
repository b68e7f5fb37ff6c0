import DeltaSnapCore
import DeltaSnapSQLiteStore
import DeltaSnapStore
import DeltaSnapTestSupport
import Foundation
import Testing

@Suite struct BakeTests {
    let reproducible = ["SOURCE_DATE_EPOCH": "1700000000", "DELTASNAP_EPOCH": "00000000000000a1"]

    func buildAndBake(in dir: TemporaryDirectory, name: String) async throws -> [UInt8] {
        let input = try dir.write("input.ndjson", Fixtures.ndjson(0..<2000))
        let db = dir.file("\(name).sqlite")
        #expect(try await CLI.run(["import", "--db", db, "--collection", "items", input], environment: reproducible).status == 0)
        let out = dir.file("out-\(name)")
        let bake = try await CLI.run(["bake", "--db", db, "--collection", "items", "--out", out])
        #expect(bake.status == 0, "\(bake.stderr)")
        return [UInt8](try Data(contentsOf: URL(fileURLWithPath: out + "/items.snapshot")))
    }

    @Test func freshStoresFromTheSameInputBakeIdenticalBytes() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try await buildAndBake(in: dir, name: "one")
        let second = try await buildAndBake(in: dir, name: "two")
        #expect(first == second)
        #expect(FileManager.default.contents(atPath: dir.file("out-one/manifest.json"))
            == FileManager.default.contents(atPath: dir.file("out-two/manifest.json")))
    }

    @Test func bakeRoundTripsThroughInspectAndMatchesTheStore() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<500), into: store, collection: "items")
        try Fixtures.importText(#"{"id":"r0000003","hidden":true}"#, into: store, collection: "items")
        let entry = try await Fixtures.bake(store.path, "items", into: dir.file("snap"))
        let head = try #require(try store.head(of: "items"))
        #expect(entry.count == 499 && entry.token == head.token.description && entry.checksum == head.checksum.description)

        var records: [UInt8] = []
        let header = try Snapshot.read(path: dir.file("snap/items.snapshot")) { record in
            records.append(contentsOf: record.bytes)
            records.append(UInt8(ascii: "\n"))
        }
        #expect(header.count == 499)
        #expect(String(decoding: records, as: UTF8.self) == (try Fixtures.export(store, "items")))

        let inspect = try await CLI.run(["inspect", dir.file("snap/items.snapshot")])
        #expect(inspect.status == 0)
        #expect(inspect.stdout.contains("count: 499") && inspect.stdout.contains("token: \(head.token)"))
        #expect(inspect.stdout.contains("checksum: \(head.checksum) (verified)"))

        let manifest = try JSONReader(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("snap/manifest.json"))))).readValue()
        let item = try #require(manifest["collections"]?["items"])
        #expect(item["sha256"] == .string(entry.sha256) && item["bytes"] == .number(String(entry.bytes)))
    }

    /// `bake --replica`: a ready client replica next to the snapshot, byte-identical from
    /// fresh stores of the same input, verified by `inspect`, and usable by `pull --snapshot`
    /// with no server at all.
    @Test func bakeReplicaIsReproducibleInspectableAndPullable() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try dir.write("input.ndjson", Fixtures.ndjson(0..<300))
        var replicas: [Data] = []
        for name in ["one", "two"] {
            let db = dir.file("\(name).sqlite")
            #expect(try await CLI.run(["import", "--db", db, "--collection", "items", input], environment: reproducible).status == 0)
            let bake = try await CLI.run(["bake", "--db", db, "--collection", "items", "--out", dir.file(name), "--replica"])
            #expect(bake.status == 0, "\(bake.stderr)")
            #expect(bake.stdout.contains("items.replica: 300 records"), "\(bake.stdout)")
            replicas.append(try Data(contentsOf: URL(fileURLWithPath: dir.file("\(name)/items.replica"))))
        }
        #expect(replicas[0] == replicas[1])
        let inspect = try await CLI.run(["inspect", dir.file("one/items.replica")])
        #expect(inspect.status == 0 && inspect.stdout.contains("count: 300") && inspect.stdout.contains("(verified)") && inspect.stdout.contains("format: replica"))
        let snapshotToken = try await CLI.run(["inspect", dir.file("one/items.snapshot")]).stdout.split(separator: "\n").first { $0.hasPrefix("token:") }
        #expect(snapshotToken != nil && inspect.stdout.contains(String(snapshotToken!)))

        // Nothing listens on port 9: the pull fails (exit 4: try later), the bundle is there.
        let pull = try await CLI.run(["pull", "--url", "http://127.0.0.1:9/v1/collections/items", "--replica", dir.file("app.sqlite"),
                                "--snapshot", dir.file("one/items.replica"), "--timeout", "1"])
        #expect(pull.status == 4, "\(pull.stderr)")
        #expect(pull.stdout.contains("records=300"), "\(pull.stdout)")
        // A sync that changed no data left the bundle in place (issue 21): nothing was copied;
        // `dump` reads the bundle it started from.
        #expect(!FileManager.default.fileExists(atPath: dir.file("app.sqlite")))
        let dump = try await CLI.run(["dump", "--replica", dir.file("app.sqlite"), "--snapshot", dir.file("one/items.replica")])
        #expect(dump.stdout == (try await CLI.run(["export", "--db", dir.file("one.sqlite"), "--collection", "items"]).stdout))
        let withoutBundle = try await CLI.run(["dump", "--replica", dir.file("app.sqlite")])
        #expect(withoutBundle.status == 1 && withoutBundle.stderr.contains("pass that file as --snapshot"), "\(withoutBundle.stderr)")

        // A damaged replica is refused in one line.
        var damaged = replicas[0]
        damaged[damaged.count - 100] ^= 0xFF
        let bad = try dir.write("bad.replica", "")
        try damaged.write(to: URL(fileURLWithPath: bad))
        let refused = try await CLI.run(["inspect", bad])
        #expect(refused.status == 1 && refused.stderr.split(separator: "\n").count == 1, "\(refused.stdout) \(refused.stderr)")
    }

    @Test func truncatedAndBitFlippedSnapshotsAreRejected() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteDatabase(path: dir.file("s.sqlite"))
        try Fixtures.importText(Fixtures.ndjson(0..<300), into: store, collection: "items")
        try await Fixtures.bake(store.path, "items", into: dir.path)
        let good = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("items.snapshot"))))

        var cases: [(String, [UInt8])] = [("truncated", Array(good.prefix(good.count / 2))), ("cut trailer", Array(good.dropLast(4)))]
        for position in [12, good.count / 3, good.count - 6] {
            var flipped = good
            flipped[position] ^= 0x04
            cases.append(("flip at \(position)", flipped))
        }
        for (label, bytes) in cases {
            let file = try dir.write("bad.snapshot", bytes: bytes)
            let result = try await CLI.run(["inspect", file])
            #expect(result.status == 1, "\(label)")
            #expect(result.stderr.hasPrefix("deltasnap: \(file): not a valid snapshot: "), "\(label): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(label)")
        }
        let missing = try await CLI.run(["inspect", dir.file("none.snapshot")])
        #expect(missing.status == 1 && missing.stderr.contains("does not exist"))
    }
}
