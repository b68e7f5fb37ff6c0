import DeltaSnapCore
import DeltaSnapTrust

/// The stores' check of an attachment's bytes: ``DeltaSnapTrust/AttachmentVerifier``'s rule,
/// its refusal reported as ``StoreError/attachmentMismatch(_:)``, which the server answers
/// `400 attachment_mismatch`.
///
/// ```swift
/// var verifier = BlobVerifier(sha256: reference.sha256, size: reference.size)
/// while let chunk = try await next() { try verifier.consume(chunk); try file.write(contentsOf: chunk) }
/// try verifier.finish()
/// ```
package struct BlobVerifier {
    private var rule: AttachmentVerifier

    package init(sha256: String, size: UInt64) {
        rule = AttachmentVerifier(sha256: sha256, size: size)
    }

    package var sha256: String { rule.sha256 }
    package var size: UInt64 { rule.size }
    package var received: UInt64 { rule.received }
    /// The SHA-256 of the bytes consumed so far, as 64 lowercase hex digits.
    package var digest: String { rule.digest }

    package mutating func consume(_ bytes: some Collection<UInt8>) throws(StoreError) {
        do { try rule.consume(bytes) } catch { throw .attachmentMismatch(error.message) }
    }

    /// Throws unless exactly ``size`` bytes whose SHA-256 is ``sha256`` were consumed.
    package func finish() throws(StoreError) {
        do { try rule.finish() } catch { throw .attachmentMismatch(error.message) }
    }
}
