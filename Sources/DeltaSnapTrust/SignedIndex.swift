import DeltaSnapCore
import Foundation

/// A short-lived, signed statement of what a server publishes: per collection its token,
/// version, record count, compaction floor and state digest, plus a sequence number that
/// never goes down, an issue time and an expiry. Deltas and snapshots carry no signature:
/// a client applies them and commits only when the result matches this index.
///
/// The signed message is `"deltasnap-index-v1\n"` followed by the canonical JSON bytes
/// (docs/PROTOCOL.md §2) of the index object; the document served and bundled is
/// `{"index":<those bytes>,"signatures":[{"key":"<key id>","signature":"<base64>"},…]}`.
///
/// ```swift
/// let index = SignedIndex(sequence: 7, issued: now, expires: now + 3600, collections: [entry])
///     .signed(with: [signingKey])
/// let document = index.document                      // served at GET /v1/index
/// let checked = try SignedIndex.parse(document)
/// try checked.verify(trusting: [trusted], now: now, heldSequence: 6)
/// ```
package struct SignedIndex: Sendable, Equatable {
    package static let format = 1
    /// `bake --signing-key` writes `NAME.index` next to `NAME.snapshot`.
    package static let fileExtension = ".index"
    package static let signingDomain = Array("deltasnap-index-v1\n".utf8)
    /// Clock skew tolerated when checking an expiry.
    package static let allowedClockSkew: Int64 = 300

    /// One collection's published state.
    package struct Entry: Sendable, Equatable {
        package var collection: String
        package var token: String
        package var version: UInt64
        package var count: Int
        package var floor: UInt64
        /// ``StateDigest/fingerprint`` of the visible state at `token`.
        package var digest: String
        package var lastModified: String

        package init(collection: String, token: String, version: UInt64, count: Int, floor: UInt64, digest: String, lastModified: String) {
            self.collection = collection
            self.token = token
            self.version = version
            self.count = count
            self.floor = floor
            self.digest = digest
            self.lastModified = lastModified
        }
    }

    /// One signature: the signer's key id and the Ed25519 signature (64 bytes).
    package struct Signature: Sendable, Equatable {
        package var keyID: String
        package var bytes: [UInt8]
    }

    /// Never decreases for a publication; a client refuses an index below one it verified.
    package var sequence: UInt64 { didSet { parsedIndexValue = nil } }
    /// Seconds since 1970.
    package var issued: Int64 { didSet { parsedIndexValue = nil } }
    /// Seconds since 1970; a client refuses the index after this (plus ``allowedClockSkew``).
    package var expires: Int64 { didSet { parsedIndexValue = nil } }
    /// Whose view this is (the token's `sub`): a user's view lists their partitions, and
    /// the signature binds the list to them, so no entry can be moved to another user's view.
    /// Nil for the public index.
    package var subject: String? { didSet { parsedIndexValue = nil } }
    /// Sorted by collection name.
    package private(set) var entries: [Entry]
    package private(set) var signatures: [Signature] = []
    /// The `index` object exactly as parsed (canonical), when this index was read from a
    /// document: its signatures cover it as it is, members this release does not know
    /// included, at any depth. Nil for an index built here, or once a field is changed.
    private var parsedIndexValue: JSONValue?

    package init(sequence: UInt64, issued: Int64, expires: Int64, entries: [Entry], subject: String? = nil) {
        self.sequence = sequence
        self.issued = issued
        self.expires = expires
        self.subject = subject
        // A server's entries come in order already: checked in one pass, not sorted again.
        let ordered = zip(entries, entries.dropFirst()).allSatisfy { $0.collection.utf8Precedes($1.collection) }
        self.entries = ordered ? entries : entries.sorted { $0.collection.utf8Precedes($1.collection) }
    }

    package func entry(for collection: String) -> Entry? { entries.first { $0.collection == collection } }

    /// Equal when they sign the same bytes with the same signatures (an index parsed from a
    /// document equals the one that wrote it).
    package static func == (lhs: SignedIndex, rhs: SignedIndex) -> Bool {
        lhs.signedMessage == rhs.signedMessage && lhs.signatures == rhs.signatures
    }

    /// The bytes a signature covers: the domain line, then the canonical index object.
    package var signedMessage: [UInt8] { Self.signingDomain + canonicalIndex }

    /// The signed bytes of a served document cut out as docs/PROTOCOL.md §8.1 tells a
    /// verifier that does not re-serialise: after the fixed prefix `{"index":`, up to the
    /// **last** `,"signatures":`. The signatures array holds only hex key ids and base64, so
    /// that occurrence is the separator even when a collection is named `signatures`.
    /// Nil when the document is not in the layout the server writes.
    ///
    /// ```swift
    /// let signed = SignedIndex.signedBytes(of: document)   // == CanonicalJSON bytes of "index"
    /// ```
    package static func signedBytes(of document: [UInt8]) -> ArraySlice<UInt8>? {
        let prefix = Array(#"{"index":"#.utf8)
        let separator = Array(#","signatures":"#.utf8)
        guard document.starts(with: prefix), document.count >= prefix.count + separator.count else { return nil }
        var start = document.count - separator.count
        while start >= prefix.count {
            if document[start..<start + separator.count].elementsEqual(separator) { return document[prefix.count..<start] }
            start -= 1
        }
        return nil
    }

    /// This index signed by every key in `keys` (several during a key rotation).
    package func signed(with keys: [IndexSigningKey]) -> SignedIndex {
        var copy = self
        let message = signedMessage
        copy.signatures = keys.map { Signature(keyID: $0.publicKey.id, bytes: $0.signature(for: message)) }
        return copy
    }

    /// The document as served and bundled, ending with a newline.
    package var document: [UInt8] {
        IndexDocument.document(index: canonicalIndex, signatures: signatures)
    }

    /// ``signed(with:)``'s ``document``, with the index serialised once for both the
    /// signatures and the document.
    ///
    /// ```swift
    /// let bytes = SignedIndex(sequence: s, issued: now, expires: now + 86_400, entries: entries).signedDocument(with: keys)
    /// ```
    package func signedDocument(with keys: [IndexSigningKey]) -> [UInt8] {
        IndexDocument.signed(index: canonicalIndex, keys: keys)
    }

    /// The canonical index object: as parsed (members this release does not know
    /// included), or written from the fields.
    private var canonicalIndex: [UInt8] {
        if let parsedIndexValue { return CanonicalJSON.bytes(parsedIndexValue) }
        return IndexDocument.index(sequence: sequence, issued: issued, expires: expires, subject: subject, members: entries.map(IndexDocument.member(of:)))
    }

    // MARK: - Reading and verifying

    /// Parses a document (signatures are checked by ``verify(trusting:now:heldSequence:)``).
    package static func parse(_ document: [UInt8]) throws(TrustError) -> SignedIndex {
        let value: JSONValue
        do {
            let reader = JSONReader(bytes: document)
            value = try reader.readValue()
            guard try reader.isAtEnd() else { throw TrustError.malformedIndex("bytes after the document") }
        } catch let error as TrustError { throw error } catch { throw .malformedIndex("not JSON: \(error)") }
        guard let indexValue = value["index"], case .object(let members) = indexValue else { throw .malformedIndex("no \"index\" object") }
        guard let format = members.integer("format"), format == UInt64(Self.format) else {
            throw .malformedIndex("unsupported or missing \"format\" (this client reads format \(Self.format))")
        }
        guard let sequence = members.integer("sequence"), let issued = members.integer("issued"), let expires = members.integer("expires"),
              issued <= UInt64(Int64.max), expires <= UInt64(Int64.max)
        else { throw .malformedIndex("\"sequence\", \"issued\" and \"expires\" must be non-negative integers") }
        guard case .object(let collections)? = members.value("collections") else { throw .malformedIndex("no \"collections\" object") }
        var entries: [Entry] = []
        for member in collections {
            guard case .object(let fields) = member.value, case .string(let token)? = fields.value("token"),
                  case .string(let digest)? = fields.value("digest"), case .string(let lastModified)? = fields.value("lastModified"),
                  let version = fields.integer("version"), let count = fields.integer("count"), let floor = fields.integer("floor"),
                  count <= UInt64(Int.max)
            else { throw .malformedIndex("collection \"\(member.key)\" lacks token, digest, lastModified, version, count or floor") }
            entries.append(Entry(
                collection: member.key, token: token, version: version, count: Int(count), floor: floor, digest: digest, lastModified: lastModified))
        }
        var subject: String?
        if let value = members.value("subject") {
            guard case .string(let text) = value else { throw .malformedIndex("\"subject\" must be a string") }
            subject = text
        }
        var index = SignedIndex(sequence: sequence, issued: Int64(issued), expires: Int64(expires), entries: entries, subject: subject)
        // The reader returns canonical values (members sorted, numbers as written), so this
        // is byte for byte what the server signed, whatever the layout it was served in.
        index.parsedIndexValue = indexValue
        guard case .array(let signatures)? = value["signatures"] else { throw .malformedIndex("no \"signatures\" array") }
        for signature in signatures {
            guard case .string(let keyID)? = signature["key"], case .string(let base64)? = signature["signature"],
                  let bytes = Data(base64Encoded: base64), bytes.count == 64
            else { throw .malformedIndex("a signature is not {\"key\":…,\"signature\":<base64 of 64 bytes>}") }
            index.signatures.append(Signature(keyID: keyID, bytes: Array(bytes)))
        }
        return index
    }

    /// Checks, in this order: a signature by one of `trusted` that verifies, the expiry
    /// (with ``allowedClockSkew``; skipped when `now` is nil, e.g. for a bundled index), and
    /// that the sequence is not below `heldSequence`, the highest one already verified.
    package func verify(trusting trusted: [TrustedKey], now: Int64?, heldSequence: UInt64?) throws(TrustError) {
        guard !signatures.isEmpty else { throw .unsigned }
        let message = signedMessage
        var verified = false
        for signature in signatures {
            guard let key = trusted.first(where: { $0.id == signature.keyID }) else { continue }
            guard key.isValidSignature(signature.bytes, for: message) else { throw .badSignature(keyID: signature.keyID) }
            verified = true
        }
        guard verified else { throw .untrustedSigner(keyIDs: signatures.map(\.keyID)) }
        if let now, now > expires + Self.allowedClockSkew { throw .expired(expires: expires, now: now) }
        if let heldSequence, sequence < heldSequence { throw .rollback(sequence: sequence, held: heldSequence) }
    }
}

extension [JSONMember] {
    fileprivate func value(_ key: String) -> JSONValue? { first { $0.key == key }?.value }

    /// A non-negative integer member written as plain digits.
    fileprivate func integer(_ key: String) -> UInt64? {
        guard case .number(let literal)? = value(key), literal.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt64(literal)
    }
}
