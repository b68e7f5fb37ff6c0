import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// `deltasnap attachment add` as a data owner runs it: one reference line, the blob kept
/// under its hash beside the store, one-line errors.
@Suite struct AttachmentCommandTests {
    @Test func addStoresTheFileAndPrintsItsReference() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let photo = try dir.write("photo.JPG", "test")
        let db = dir.file("s.sqlite")
        let added = try CLI.run(["attachment", "add", "--db", db, "--collection", "notes", photo])
        let sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        #expect(added.status == 0, "\(added.stderr)")
        #expect(added.stdout == #"{"$attachment":"\#(sha256)","size":4,"type":"image/jpeg"}"# + "\n")
        #expect(try String(contentsOfFile: "\(db).attachments/9f/\(sha256)", encoding: .utf8) == "test")

        // The printed line is a reference a record can hold as it is.
        let record = try Record(json: Array(#"{"id":"n1","photo":\#(added.stdout.dropLast())}"#.utf8))
        #expect(try AttachmentReference.references(in: record).map(\.sha256) == [sha256])

        let typed = try CLI.run(["attachment", "add", "--db", db, "--collection", "notes/alice", "--type", "text/plain; charset=utf-8", photo])
        #expect(typed.status == 0 && typed.stdout.contains(#""type":"text/plain; charset=utf-8""#), "\(typed.stdout)\(typed.stderr)")
    }

    @Test func badInputIsOneLineAndAnExitCode() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = try dir.write("a.bin", "x")
        let db = dir.file("s.sqlite")
        let missing = try CLI.run(["attachment", "add", "--db", db, "--collection", "notes", dir.file("nope.bin")])
        #expect(missing.status == 1 && missing.stderr.hasPrefix("deltasnap: ") && missing.stderr.split(separator: "\n").count == 1, "\(missing.stderr)")
        for arguments in [["--collection", "no such/name/at/all"], ["--collection", "notes", "--type", "jpeg"]] {
            let refused = try CLI.run(["attachment", "add", "--db", db] + arguments + [file])
            #expect(refused.status == 2, "\(arguments): \(refused.stderr)")
        }
        #expect(try CLI.run(["attachment", "add", "--help"]).stdout.contains("reference"))
    }

    /// The data owner's loop: add a file, import a record that refers to it, bake with the
    /// files for the app bundle; a record naming a file the store lacks is refused naming its
    /// line; `compact` reports the files it collected.
    @Test func importChecksFilesAndBakeBundlesThem() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let photo = try dir.write("photo.png", "a small picture")
        let added = try CLI.run(["attachment", "add", "--db", db, "--collection", "notes", photo])
        #expect(added.status == 0, "\(added.stderr)")
        let reference = added.stdout.trimmingCharacters(in: .newlines)
        let missing = #"{"$attachment":"\#(String(repeating: "b", count: 64))","size":3,"type":"image/png"}"#
        let bad = try dir.write("bad.ndjson", #"{"id":"n1","photo":\#(reference)}"# + "\n" + #"{"id":"n2","photo":\#(missing)}"# + "\n")
        let refused = try CLI.run(["import", "--db", db, "--collection", "notes", bad])
        #expect(refused.status != 0 && refused.stderr.contains("bad.ndjson:2") && refused.stderr.contains("does not hold"), "\(refused.stderr)")
        let good = try dir.write("good.ndjson", #"{"id":"n1","photo":\#(reference)}"# + "\n")
        let imported = try CLI.run(["import", "--db", db, "--collection", "notes", good])
        #expect(imported.status == 0, "\(imported.stderr)")

        let out = dir.file("Snapshots")
        let baked = try CLI.run(["bake", "--db", db, "--collection", "notes", "--out", out, "--attachments"])
        #expect(baked.status == 0 && baked.stdout.contains("attachments: 1 file, 15 bytes"), "\(baked.stdout)\(baked.stderr)")
        let sha256 = try #require(AttachmentReference.references(in: Record(json: Array(#"{"id":"x","p":\#(reference)}"#.utf8))).first?.sha256)
        #expect(try String(contentsOfFile: "\(out)/attachments/\(sha256)", encoding: .utf8) == "a small picture")

        let compacted = try CLI.run(["compact", "--db", db, "--collection", "notes", "--keep-versions", "10", "--attachment-grace-days", "0"])
        #expect(compacted.status == 0 && compacted.stdout.contains("attachments: 0 removed (0 bytes), 0 unreferenced"), "\(compacted.stdout)\(compacted.stderr)")
    }
}
