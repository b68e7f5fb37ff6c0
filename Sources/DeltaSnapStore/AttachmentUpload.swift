import DeltaSnapCore

/// A resumable upload of one attachment (docs/PROTOCOL.md §12.4): the bytes received so
/// far are kept by the store, durably, so an upload cut by a bad network, a killed client
/// or a restarted server goes on from ``received`` — on any instance of a shared store.
///
/// ```swift
/// let upload = AttachmentUpload(token: token, reference: reference, collection: "notes/alice", owner: "alice")
/// try await store.createUpload(upload)
/// var received = try await store.appendUpload(token, at: 0, from: body.next)
/// if received == reference.size { try await store.completeUpload(token) }
/// ```
package struct AttachmentUpload: Sendable, Equatable {
    /// The upload's name in its URL (`/v1/uploads/{token}`): 128 random bits, hex.
    package var token: String
    /// The blob being uploaded: its SHA-256, its size and its media type.
    package var reference: AttachmentReference
    /// The collection or partition it is uploaded to: who may go on with it may write there.
    package var collection: String
    /// Who started it (the token's subject); only they, or the admin, may go on with it.
    package var owner: String
    /// The bytes the store holds so far, durably.
    package var received: UInt64
    /// Seconds since 1970 when it began: an upload left alone for a day is removed.
    package var createdAt: Int64

    package init(token: String, reference: AttachmentReference, collection: String, owner: String, received: UInt64 = 0, createdAt: Int64) {
        self.token = token
        self.reference = reference
        self.collection = collection
        self.owner = owner
        self.received = received
        self.createdAt = createdAt
    }

    /// 32 lowercase hex digits.
    package static func isToken(_ text: String) -> Bool {
        text.utf8.count == 32 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// A new random token.
    package static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for _ in 0..<2 {
            let word = generator.next() as UInt64
            for shift in stride(from: 60, through: 0, by: -4) { text.append(hex[Int((word >> UInt64(shift)) & 15)]) }
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// How often an append makes what it received durable (and visible to a `HEAD`).
    package static let checkpointBytes: UInt64 = 8 << 20
}
