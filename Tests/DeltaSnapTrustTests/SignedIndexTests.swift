import DeltaSnapCore
import Foundation
import Testing

@testable import DeltaSnapTrust

@Suite struct SignedIndexTests {
    let entry = SignedIndex.Entry(
        collection: "countries", token: "00000000000000a1.3", version: 3, count: 249, floor: 1,
        digest: String(repeating: "ab", count: 32), lastModified: "Sun, 22 Nov 2026 12:00:00 GMT")

    @Test func theOnePassDocumentIsTheSignedIndexsDocument() throws {
        var second = entry
        second.collection = "sets/8271"
        for keys in [[], [IndexSigningKey.generate()], [IndexSigningKey.generate(), IndexSigningKey.generate()]] {
            for subject in [nil, "alice"] as [String?] {
                let index = SignedIndex(sequence: 7, issued: 100, expires: 200, entries: [entry, second], subject: subject)
                #expect(index.signedDocument(with: keys) == index.signed(with: keys).document)
            }
        }
    }

    /// The index is written field by field (``IndexDocument``), not through a JSON tree: a
    /// reader's canonical form of what it parses must be those very bytes, for names that
    /// need escaping, names outside ASCII, and members given out of order.
    @Test func theWrittenIndexIsCanonical() throws {
        let names = ["b", "a\"quote", "sets/Ünïcode", "tab\tname", "back\\slash", "z/ctrl\u{1}", "A", "sets/8271", "sets/82710", "é"]
        let entries = names.enumerated().map { position, name in
            SignedIndex.Entry(
                collection: name, token: "0000000000000\(position).\(position)", version: UInt64(position), count: position * 1_000,
                floor: UInt64(position / 2), digest: String(repeating: "0f", count: 32), lastModified: "Sun, 22 Nov 2026 12:00:0\(position) GMT")
        }
        for subject in [nil, "alice", "bö\"b\n"] as [String?] {
            let document = SignedIndex(sequence: 9, issued: 1_700_000_000, expires: 1_700_086_400, entries: entries, subject: subject)
                .signedDocument(with: [IndexSigningKey.generate()])
            let value = try JSONReader(bytes: document).readValue()
            let index = try #require(value["index"])
            #expect(Array(try #require(SignedIndex.signedBytes(of: document))) == CanonicalJSON.bytes(index))
            #expect(CanonicalJSON.bytes(value) + Array("\n".utf8) == document)
            let parsed = try SignedIndex.parse(document)
            #expect(parsed.entries.map(\.collection) == names.sorted { $0.utf8Precedes($1) })
            #expect(parsed.subject == subject)
        }
    }

    @Test func aDocumentRoundTripsAndVerifies() throws {
        let key = IndexSigningKey.generate()
        let index = SignedIndex(sequence: 42, issued: 1_000, expires: 2_000, entries: [entry]).signed(with: [key])
        let parsed = try SignedIndex.parse(index.document)
        #expect(parsed == index)
        try parsed.verify(trusting: [key.publicKey], now: 1_500, heldSequence: 42)
        #expect(String(decoding: index.document, as: UTF8.self).hasPrefix(#"{"index":{"collections":{"countries":{"count":249,"#))
    }

    /// The signed message is the domain line and the canonical index object, exactly as the
    /// document carries it (a third party may take those bytes by position).
    @Test func theSignedBytesAreTheIndexObjectAsWritten() throws {
        let index = SignedIndex(sequence: 1, issued: 10, expires: 20, entries: [entry])
        let document = String(decoding: index.document, as: UTF8.self)
        let object = String(document.dropFirst(#"{"index":"#.count).prefix { $0 != "\n" })
        let end = try #require(object.range(of: #","signatures":"#))
        #expect(Array("deltasnap-index-v1\n".utf8) + Array(object[..<end.lowerBound].utf8) == index.signedMessage)
    }

    /// docs/PROTOCOL.md §8.1: cut after `{"index":` and before the **last** `,"signatures":`;
    /// the Ed25519 signature verifies over the domain line and those bytes, even when a
    /// collection named `signatures` puts that text inside the signed part.
    @Test func theDocumentedCutVerifiesWithACollectionNamedSignatures() throws {
        let key = IndexSigningKey.generate()
        var named = entry
        named.collection = "signatures"
        let index = SignedIndex(sequence: 7, issued: 10, expires: 20, entries: [entry, named]).signed(with: [key, IndexSigningKey.generate()])
        let document = index.document
        let cut = try #require(SignedIndex.signedBytes(of: document))
        #expect(String(decoding: cut, as: UTF8.self).contains(#","signatures":{"#))
        let signature = try #require(SignedIndex.parse(document).signatures.first)
        #expect(key.publicKey.isValidSignature(signature.bytes, for: SignedIndex.signingDomain + Array(cut)))
        #expect(SignedIndex.signedBytes(of: Array(#"{"other":1}"#.utf8)) == nil)
        #expect(SignedIndex.signedBytes(of: Array(#"{"index":{}}"#.utf8)) == nil)
    }

    /// A verifier re-serialises what it parsed, members it does not know included, at any
    /// depth (a later server may add some to an entry).
    @Test func unknownMembersInsideAnEntryStaySigned() throws {
        let key = IndexSigningKey.generate()
        let base = String(decoding: SignedIndex(sequence: 1, issued: 10, expires: 20, entries: [entry]).document, as: UTF8.self)
        let extended = base.replacingOccurrences(of: #""count":249,"#, with: #""count":249,"cursor":"x1","#)
        let unsigned = try SignedIndex.parse(Array(extended.utf8))
        let signed = unsigned.signed(with: [key])
        let reparsed = try SignedIndex.parse(signed.document)
        try reparsed.verify(trusting: [key.publicKey], now: 15, heldSequence: nil)
        #expect(String(decoding: signed.document, as: UTF8.self).contains(#""cursor":"x1""#))
    }

    @Test func refusals() throws {
        let key = IndexSigningKey.generate()
        let other = IndexSigningKey.generate()
        let index = SignedIndex(sequence: 42, issued: 1_000, expires: 2_000, entries: [entry])
        #expect(throws: TrustError.unsigned) { try index.verify(trusting: [key.publicKey], now: nil, heldSequence: nil) }
        #expect(throws: TrustError.untrustedSigner(keyIDs: [other.publicKey.id])) {
            try index.signed(with: [other]).verify(trusting: [key.publicKey], now: nil, heldSequence: nil)
        }
        #expect(throws: TrustError.expired(expires: 2_000, now: 2_301)) {
            try index.signed(with: [key]).verify(trusting: [key.publicKey], now: 2_301, heldSequence: nil)
        }
        try index.signed(with: [key]).verify(trusting: [key.publicKey], now: 2_300, heldSequence: nil)  // within the skew
        #expect(throws: TrustError.rollback(sequence: 42, held: 43)) {
            try index.signed(with: [key]).verify(trusting: [key.publicKey], now: nil, heldSequence: 43)
        }
        let tampered = Array(String(decoding: index.signed(with: [key]).document, as: UTF8.self)
            .replacingOccurrences(of: #""sequence":42"#, with: #""sequence":43"#).utf8)
        #expect(throws: TrustError.badSignature(keyID: key.publicKey.id)) {
            try SignedIndex.parse(tampered).verify(trusting: [key.publicKey], now: nil, heldSequence: nil)
        }
        for bad in ["", "[]", #"{"index":{}}"#, #"{"index":{"format":2,"collections":{},"sequence":1,"issued":1,"expires":2},"signatures":[]}"#] {
            #expect(throws: TrustError.self) { try SignedIndex.parse(Array(bad.utf8)) }
        }
    }

    /// Members a later release adds are signed and kept, so an older client still verifies.
    @Test func unknownMembersAreSignedAndKept() throws {
        let key = IndexSigningKey.generate()
        let base = String(decoding: SignedIndex(sequence: 1, issued: 10, expires: 20, entries: [entry]).document, as: UTF8.self)
        let extended = base.replacingOccurrences(of: #""sequence":1}"#, with: #""sequence":1,"zfuture":[1,2]}"#)
        let parsed = try SignedIndex.parse(Array(extended.utf8))
        let resigned = parsed.signed(with: [key])
        try SignedIndex.parse(resigned.document).verify(trusting: [key.publicKey], now: nil, heldSequence: nil)
        #expect(String(decoding: resigned.document, as: UTF8.self).contains(#""zfuture":[1,2]"#))
    }

    @Test func keyFiles() throws {
        let dir = NSTemporaryDirectory() + "keys-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let key = IndexSigningKey.generate()
        try key.write(toDirectory: dir)
        let loaded = try IndexSigningKey(contentsOf: dir + "/signing.key")
        let trusted = try TrustedKey(contentsOf: dir + "/signing.pub")
        #expect(trusted == key.publicKey)
        #expect(loaded.publicKey == key.publicKey)
        #expect(throws: TrustError.self) { try key.write(toDirectory: dir) }  // never overwritten
        #expect(throws: TrustError.self) { try TrustedKey(contentsOf: dir + "/signing.key") }
        #expect(throws: TrustError.self) { try IndexSigningKey(contentsOf: dir + "/signing.pub") }
        #expect(throws: TrustError.self) { try TrustedKey(contentsOf: dir + "/missing.pub") }
        let mode = try FileManager.default.attributesOfItem(atPath: dir + "/signing.key")[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }
}
