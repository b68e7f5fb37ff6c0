import DeltaSnapCore
import DeltaSnapTrust
import Foundation
import Testing

/// The shared protocol vectors (Tests/Fixtures/protocol-vectors.json), which the TypeScript
/// browser client's unit tests (clients/typescript/test) read too: both clients are held to
/// the same canonical bytes, XXH64 values, state checksums, LtHash16 digests, bodies and
/// signed indexes. The file is generated from the deltasnap binary's own outputs by
/// clients/typescript/tools/make-protocol-vectors.py; this suite also catches a Swift change
/// that would make the committed vectors (and so the other client) disagree with it.
@Suite struct ProtocolVectorsTests {
    struct Vectors: Decodable {
        struct Canonical: Decodable {
            struct Valid: Decodable { var input: String; var canonical: String }
            var valid: [Valid]
            var invalid: [String]
        }
        struct HashVector: Decodable { var utf8: String?; var bytesMod256: Int?; var xxh64: String }
        struct Checksum: Decodable { var collection: String; var records: [String]; var checksum: String }
        struct LtHash: Decodable {
            struct Example: Decodable { var collection: String; var records: [String]; var laneBytesPrefix: String; var fingerprint: String }
            struct FromServer: Decodable { var collection: String; var body: String; var fingerprint: String }
            var protocolExample: Example
            var empty: String
            var fromServer: [FromServer]
        }
        struct Bodies: Decodable { var fullBody: String; var deltaBody: String; var fullBodyAfterDelta: String }
        struct Signed: Decodable { var trustedKey: String; var documents: [String] }
        struct Attachments: Decodable {
            struct Reference: Decodable { var record: String; var verdict: String; var sha256: [String]? }
            struct File: Decodable { var bytesMod256: Int; var sha256: String }
            var references: [Reference]
            var sha256: [File]
        }
        var canonicalJSON: Canonical
        var xxh64: [HashVector]
        var stateChecksum: [Checksum]
        var ltHash16: LtHash
        var bodies: Bodies
        var signedIndex: Signed
        var attachments: Attachments
    }

    static let vectors: Vectors = {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/protocol-vectors.json")
        return try! JSONDecoder().decode(Vectors.self, from: Data(contentsOf: url))
    }()

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    static func hex16(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// A body's records and header, read by the Swift reader.
    static func read(_ body: String) throws -> (BodyHeader, [Record]) {
        let reader = BodyReader(bytes: Array(body.utf8))
        let header = try reader.readHeader()
        var records: [Record] = []
        while let record = try reader.nextRecord() { records.append(record) }
        return (header, records)
    }

    @Test func canonicalBytes() throws {
        for vector in Self.vectors.canonicalJSON.valid {
            let record = try Record(json: Array(vector.input.utf8))
            #expect(String(decoding: record.bytes, as: UTF8.self) == vector.canonical, "\(vector.input)")
        }
    }

    @Test func invalidJSONIsRefused() {
        for text in Self.vectors.canonicalJSON.invalid {
            #expect(throws: (any Error).self, "\(text)") {
                let reader = JSONReader(bytes: Array(text.utf8))
                _ = try reader.readValue()
                if try !reader.isAtEnd() { throw reader.error("trailing") }
            }
        }
    }

    @Test func xxh64() {
        for vector in Self.vectors.xxh64 {
            let bytes: [UInt8] = vector.bytesMod256.map { count in (0..<count).map { UInt8($0 % 256) } } ?? Array(vector.utf8!.utf8)
            #expect(Self.hex16(XXH64.hash(bytes)) == vector.xxh64, "\(vector.utf8 ?? "\(vector.bytesMod256!) bytes")")
        }
    }

    @Test func stateChecksums() throws {
        for vector in Self.vectors.stateChecksum {
            var checksum = StateChecksum.empty
            for line in vector.records {
                let text = line.hasSuffix(",") ? String(line.dropLast()) : line
                checksum.add(try Record(json: Array(text.utf8)))
            }
            #expect(checksum.description == vector.checksum, "\(vector.collection)")
        }
    }

    @Test func ltHash16() throws {
        let example = Self.vectors.ltHash16.protocolExample
        var digest = StateDigest.empty
        for text in example.records {
            let record = try Record(json: Array(text.utf8))
            digest.add(collection: example.collection, id: record.id, canonical: record.bytes)
        }
        #expect(Self.hex(digest.bytes.prefix(8)) == example.laneBytesPrefix)
        #expect(digest.fingerprint == example.fingerprint)
        #expect(StateDigest.empty.fingerprint == Self.vectors.ltHash16.empty)
        let bodies = ["fullBody": Self.vectors.bodies.fullBody, "fullBodyAfterDelta": Self.vectors.bodies.fullBodyAfterDelta]
        for vector in Self.vectors.ltHash16.fromServer {
            let (_, records) = try Self.read(try #require(bodies[vector.body]))
            var state = StateDigest.empty
            for record in records { state.add(collection: vector.collection, id: record.id, canonical: record.bytes) }
            #expect(state.fingerprint == vector.fingerprint, "\(vector.body)")
        }
    }

    /// The delta applies on the full body and leads to the next full body, checksum included.
    @Test func bodies() throws {
        let (fullHeader, full) = try Self.read(Self.vectors.bodies.fullBody)
        let (deltaHeader, delta) = try Self.read(Self.vectors.bodies.deltaBody)
        let (afterHeader, after) = try Self.read(Self.vectors.bodies.fullBodyAfterDelta)
        #expect(fullHeader.kind == .full && deltaHeader.kind == .delta && afterHeader.kind == .full)
        #expect(deltaHeader.base == fullHeader.token)
        #expect(deltaHeader.token == afterHeader.token)
        #expect(delta.contains { $0.isHidden })
        var state = Dictionary(uniqueKeysWithValues: full.map { ($0.id, $0) })
        var checksum = StateChecksum.empty
        full.forEach { checksum.add($0) }
        #expect(checksum == fullHeader.checksum)
        for record in delta {
            if let old = state[record.id] { checksum.remove(old) }
            if record.isHidden {
                state[record.id] = nil
            } else {
                state[record.id] = record
                checksum.add(record)
            }
        }
        #expect(checksum == deltaHeader.checksum)
        #expect(checksum == afterHeader.checksum)
        #expect(state.values.map(\.bytes).sorted { $0.lexicographicallyPrecedes($1) } == after.map(\.bytes).sorted { $0.lexicographicallyPrecedes($1) })
    }

    @Test func signedIndexesVerify() throws {
        let line = Self.vectors.signedIndex.trustedKey
        let raw = try #require(Data(base64Encoded: String(line.dropFirst("ed25519-public:".count))))
        let key = try TrustedKey(rawRepresentation: Array(raw))
        for document in Self.vectors.signedIndex.documents {
            let bytes = Array(document.utf8)
            let index = try SignedIndex.parse(bytes)
            try index.verify(trusting: [key], now: nil, heldSequence: nil)
            #expect(index.entry(for: "signatures") != nil)
            // The documented cut (the last `,"signatures":`) gives the bytes re-serialising gives.
            let cut = try #require(SignedIndex.signedBytes(of: bytes))
            #expect(SignedIndex.signingDomain + Array(cut) == index.signedMessage)
        }
        let forged = Self.vectors.signedIndex.documents[0].replacingOccurrences(of: #""floor":0"#, with: #""floor":1"#)
        #expect(throws: TrustError.self) { try SignedIndex.parse(Array(forged.utf8)).verify(trusting: [key], now: nil, heldSequence: nil) }
    }

    /// What a record refers to (PROTOCOL.md §12.1) and files' SHA-256, as the browser client reads them too.
    @Test func attachmentReferencesAndHashes() throws {
        for vector in Self.vectors.attachments.references {
            let value = try JSONReader(bytes: Array(vector.record.utf8)).readValue()
            if vector.verdict == "invalid" {
                #expect(throws: AttachmentReferenceError.self, "\(vector.record)") { _ = try AttachmentReference.references(in: value) }
            } else {
                #expect(try AttachmentReference.references(in: value).map(\.sha256) == vector.sha256 ?? [], "\(vector.record)")
            }
        }
        for file in Self.vectors.attachments.sha256 {
            #expect(AttachmentVerifier.sha256(of: (0..<file.bytesMod256).map { UInt8($0 % 256) }) == file.sha256)
        }
    }
}
