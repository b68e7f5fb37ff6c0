import Crypto

/// Checks an attachment's bytes against the size and SHA-256 its reference states while they
/// stream in: the one rule the stores (through `BlobVerifier`), the server and the client
/// run before a blob is kept or shown. More bytes than stated fail at once, before they are
/// written anywhere.
///
/// ```swift
/// var verifier = AttachmentVerifier(sha256: reference.sha256, size: reference.size)
/// while let chunk = try await next() { try verifier.consume(chunk); try file.write(contentsOf: chunk) }
/// try verifier.finish()   // throws AttachmentMismatch on a short body or another hash
/// ```
package struct AttachmentVerifier {
    package let sha256: String
    package let size: UInt64
    package private(set) var received: UInt64 = 0
    private var hasher = SHA256()

    package init(sha256: String, size: UInt64) {
        self.sha256 = sha256
        self.size = size
    }

    package mutating func consume(_ bytes: some Collection<UInt8>) throws(AttachmentMismatch) {
        received += UInt64(bytes.count)
        guard received <= size else { throw AttachmentMismatch("the attachment \(sha256) is \(size) bytes; more were sent") }
        if let done: Void = bytes.withContiguousStorageIfAvailable({ hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }) {
            return done
        }
        hasher.update(data: Array(bytes))
    }

    /// The SHA-256 of the bytes consumed so far, as 64 lowercase hex digits.
    package var digest: String { Self.hex(hasher.finalize()) }

    /// Throws unless exactly ``size`` bytes whose SHA-256 is ``sha256`` were consumed.
    package func finish() throws(AttachmentMismatch) {
        guard received == size else { throw AttachmentMismatch("the attachment \(sha256) is \(size) bytes; \(received) were sent") }
        let digest = digest
        guard digest == sha256 else { throw AttachmentMismatch("the bytes sent have SHA-256 \(digest), not \(sha256)") }
    }

    /// The SHA-256 of `bytes` as 64 lowercase hex digits.
    package static func sha256(of bytes: some Sequence<UInt8>) -> String {
        hex(SHA256.hash(data: Array(bytes)))
    }

    private static func hex(_ digest: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in digest {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// Bytes that are not what their attachment reference states (size or SHA-256).
package struct AttachmentMismatch: Error, Equatable, CustomStringConvertible {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }

    package var description: String { message }
}
