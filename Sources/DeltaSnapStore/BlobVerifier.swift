import Crypto
import DeltaSnapCore

/// Checks an attachment's bytes against the size and SHA-256 its reference states while they
/// stream in, so a store keeps a blob only once every byte is proven: the one rule both
/// stores (and the client) run. More bytes than stated fail at once, before they are written.
///
/// ```swift
/// var verifier = BlobVerifier(sha256: reference.sha256, size: reference.size)
/// while let chunk = try await next() { try verifier.consume(chunk); try file.write(contentsOf: chunk) }
/// try verifier.finish()   // throws StoreError.attachmentMismatch on a short body or another hash
/// ```
package struct BlobVerifier {
    package let sha256: String
    package let size: UInt64
    package private(set) var received: UInt64 = 0
    private var hasher = SHA256()

    package init(sha256: String, size: UInt64) {
        self.sha256 = sha256
        self.size = size
    }

    package mutating func consume(_ bytes: some Collection<UInt8>) throws(StoreError) {
        received += UInt64(bytes.count)
        guard received <= size else {
            throw .attachmentMismatch("the attachment \(sha256) is \(size) bytes; more were sent")
        }
        if let done: Void = bytes.withContiguousStorageIfAvailable({ hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }) {
            return done
        }
        hasher.update(data: Array(bytes))
    }

    /// The SHA-256 of the bytes consumed so far, as 64 lowercase hex digits.
    package var digest: String {
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in hasher.finalize() {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Throws unless exactly ``size`` bytes whose SHA-256 is ``sha256`` were consumed.
    package func finish() throws(StoreError) {
        guard received == size else {
            throw .attachmentMismatch("the attachment \(sha256) is \(size) bytes; \(received) were sent")
        }
        let digest = digest
        guard digest == sha256 else {
            throw .attachmentMismatch("the bytes sent have SHA-256 \(digest), not \(sha256)")
        }
    }
}
