import DeltaSnapCore
import Testing

/// The attachment reference format (docs/PROTOCOL.md, "Attachments"): found in a record's
/// top-level members and arrays, canonical, and refused when malformed.
@Suite struct AttachmentReferenceTests {
    static let hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"  // SHA-256 of "test"

    @Test func referencesAreFoundInMembersAndArraysAndWrittenCanonically() throws {
        let other = String(repeating: "a", count: 64)
        let record = try Record(json: Array("""
            {"id":"n1","title":"x","photo":{"type":"image/jpeg","size":4,"$attachment":"\(Self.hash)"},
             "scans":[{"$attachment":"\(other)","size":10,"type":"application/pdf"},{"$attachment":"\(Self.hash)","size":4,"type":"image/jpeg"}],
             "meta":{"nested":{"$attachment":"\(other)","size":1,"type":"text/plain"}}}
            """.utf8))
        let found = try AttachmentReference.references(in: record)
        // Member order (canonical: "photo" < "scans"), each hash once; a reference nested
        // deeper than a top-level member or array is plain data.
        #expect(found.map(\.sha256) == [Self.hash, other])
        #expect(found[0].size == 4 && found[0].type == "image/jpeg")
        #expect(found[0].description == #"{"$attachment":"\#(Self.hash)","size":4,"type":"image/jpeg"}"#)
        #expect(try AttachmentReference.references(in: Record.tombstone(id: "n1")).isEmpty)
    }

    @Test(arguments: [
        (#"{"$attachment":"ABC","size":1,"type":"a/b"}"#, AttachmentReferenceError.Kind.badHash),
        (#"{"$attachment":"\#(hash.uppercased())","size":1,"type":"a/b"}"#, .badHash),
        (#"{"$attachment":"\#(hash)","size":-1,"type":"a/b"}"#, .badSize),
        (#"{"$attachment":"\#(hash)","size":1.5,"type":"a/b"}"#, .badSize),
        (#"{"$attachment":"\#(hash)","size":9007199254740992,"type":"a/b"}"#, .badSize),
        (#"{"$attachment":"\#(hash)","size":1,"type":"jpeg"}"#, .badType),
        (#"{"$attachment":"\#(hash)","size":1,"type":"image/jpeg\n"}"#, .badType),
        (#"{"$attachment":"\#(hash)","size":1}"#, .badShape),
        (#"{"$attachment":"\#(hash)","size":1,"type":"a/b","extra":true}"#, .badShape),
        (#"{"$attachment":7,"size":1,"type":"a/b"}"#, .badShape),
    ])
    func aMalformedReferenceIsRefusedNamingItsMember(_ json: String, _ kind: AttachmentReferenceError.Kind) throws {
        let record = try Record(json: Array(#"{"id":"n1","photo":\#(json)}"#.utf8))
        #expect {
            _ = try AttachmentReference.references(in: record)
        } throws: { error in
            guard let error = error as? AttachmentReferenceError else { return false }
            return error.kind == kind && error.member == "photo" && error.description.hasPrefix(#"member "photo": "#)
        }
    }

    @Test func anObjectWithoutTheMarkerIsPlainData() throws {
        let record = try Record(json: Array(#"{"id":"n1","photo":{"sha256":"\#(Self.hash)","size":4,"type":"image/jpeg"}}"#.utf8))
        #expect(try AttachmentReference.references(in: record).isEmpty)
    }
}
