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
}
