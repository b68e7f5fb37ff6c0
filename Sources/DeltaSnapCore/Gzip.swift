import CZlib

/// Why gzip bytes could not be decompressed.
package enum GzipError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The stream ended before the gzip trailer: a cut-off download or file.
    case truncated
    /// zlib rejected the bytes (a bad header, a flipped bit, a CRC mismatch).
    case corrupt(String)
    /// Bytes follow the end of the gzip stream.
    case trailingData
    /// zlib could not initialise (out of memory).
    case internalError(Int32)

    package var description: String {
        switch self {
        case .truncated: "gzip data is truncated"
        case .corrupt(let reason): "gzip data is corrupt (\(reason))"
        case .trailingData: "unexpected data after the end of the gzip stream"
        case .internalError(let code): "zlib failed with code \(code)"
        }
    }
}

/// Where a ``GzipCompressor`` appends its output: a `[UInt8]`, or the server's NIO
/// `ByteBuffer` (DeltaSnapCore links no NIO, so the server adds that conformance), so a
/// compressed chunk is written once, into the buffer that is sent.
package protocol ByteSink {
    mutating func append(bytes: UnsafeRawBufferPointer)
}

extension Array: ByteSink where Element == UInt8 {
    package mutating func append(bytes: UnsafeRawBufferPointer) { append(contentsOf: bytes) }
}

/// Streaming gzip compression with a deterministic header.
///
/// The header is written here rather than by zlib so it never carries a time, a file name,
/// or a platform-dependent OS byte: the same input gives the same bytes everywhere
/// (zlib's own gzip header records the OS, which differs between Linux and macOS builds).
///
/// ```swift
/// let compressor = try GzipCompressor()
/// var out: [UInt8] = []
/// compressor.compress(Array("hello".utf8), into: &out)
/// compressor.finish(into: &out)
/// ```
package final class GzipCompressor {
    private let stream: UnsafeMutablePointer<z_stream>
    private var crc: uLong = crc32(0, nil, 0)
    private var inputSize: UInt32 = 0
    private var finished = false
    private var output = [UInt8](repeating: 0, count: 64 * 1024)

    /// The fixed gzip header: magic, deflate, no flags, mtime 0, no extra flags, OS 255 ("unknown").
    package static let header: [UInt8] = [0x1F, 0x8B, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xFF]

    /// `level` is zlib's 1 (fastest) to 9 (smallest); 6 is zlib's and gzip's default.
    package init(level: Int32 = 6) throws(GzipError) {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        // Negative window bits: a raw deflate stream, framed by our own header and trailer.
        let status = deltasnap_deflateInit2(stream, level, -MAX_WBITS)
        guard status == Z_OK else {
            stream.deallocate()
            throw .internalError(status)
        }
    }

    deinit {
        deflateEnd(stream)
        stream.deallocate()
    }

    /// Whether the header has been emitted yet.
    private var headerWritten = false

    /// Compresses `input`, appending whatever compressed bytes are ready to `out`.
    package func compress<Sink: ByteSink>(_ input: [UInt8], into out: inout Sink) {
        input.withUnsafeBytes { compress($0, into: &out) }
    }

    /// Compresses `input`, appending whatever compressed bytes are ready to `out`.
    package func compress<Sink: ByteSink>(_ input: UnsafeRawBufferPointer, into out: inout Sink) {
        precondition(!finished, "GzipCompressor used after finish")
        writeHeaderIfNeeded(into: &out)
        guard let base = input.baseAddress, input.count > 0 else { return }
        crc = crc32(crc, base.assumingMemoryBound(to: Bytef.self), uInt(input.count))
        inputSize &+= UInt32(truncatingIfNeeded: input.count)
        stream.pointee.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = uInt(input.count)
        run(flush: Z_NO_FLUSH, into: &out)
    }

    /// Ends the stream: flushes deflate and appends the CRC-32 and size trailer.
    package func finish<Sink: ByteSink>(into out: inout Sink) {
        precondition(!finished, "GzipCompressor finished twice")
        writeHeaderIfNeeded(into: &out)
        stream.pointee.next_in = nil
        stream.pointee.avail_in = 0
        run(flush: Z_FINISH, into: &out)
        finished = true
        for value in [UInt32(truncatingIfNeeded: crc), inputSize] {
            withUnsafeBytes(of: value.littleEndian) { out.append(bytes: $0) }
        }
    }

    private func writeHeaderIfNeeded<Sink: ByteSink>(into out: inout Sink) {
        if !headerWritten {
            Self.header.withUnsafeBytes { out.append(bytes: $0) }
            headerWritten = true
        }
    }

    private func run<Sink: ByteSink>(flush: Int32, into out: inout Sink) {
        output.withUnsafeMutableBufferPointer { buffer in
            while true {
                stream.pointee.next_out = buffer.baseAddress
                stream.pointee.avail_out = uInt(buffer.count)
                let status = deflate(stream, flush)
                let produced = buffer.count - Int(stream.pointee.avail_out)
                out.append(bytes: UnsafeRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[0..<produced])))
                // Z_BUF_ERROR only means "no progress possible": all input is consumed.
                precondition(status == Z_OK || status == Z_STREAM_END || status == Z_BUF_ERROR, "deflate failed: \(status)")
                if flush == Z_FINISH {
                    if status == Z_STREAM_END { return }
                } else if stream.pointee.avail_out != 0 {
                    return
                }
            }
        }
    }

    /// Compresses `bytes` in one go.
    package static func compress(_ bytes: [UInt8], level: Int32 = 6) -> [UInt8] {
        // Only an out-of-memory zlib can fail to initialise.
        let compressor = try! GzipCompressor(level: level)
        var out: [UInt8] = []
        compressor.compress(bytes, into: &out)
        compressor.finish(into: &out)
        return out
    }
}

/// Streaming decompression of gzip (or zlib) bytes; detects truncation and corruption.
///
/// ```swift
/// let decompressor = try GzipDecompressor()
/// var text: [UInt8] = []
/// try decompressor.decompress(chunk, into: &text)   // for each chunk received
/// try decompressor.finish()                         // throws .truncated if the stream was cut
/// ```
package final class GzipDecompressor {
    private let stream: UnsafeMutablePointer<z_stream>
    private var output = [UInt8](repeating: 0, count: 64 * 1024)
    /// True once zlib saw the end of the stream and its checksum matched.
    package private(set) var isComplete = false

    package init() throws(GzipError) {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        // 15 + 32: accept gzip or zlib framing, detected from the header.
        let status = deltasnap_inflateInit2(stream, MAX_WBITS + 32)
        guard status == Z_OK else {
            stream.deallocate()
            throw .internalError(status)
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deallocate()
    }

    /// Decompresses `input`, appending the bytes it yields to `out`.
    package func decompress(_ input: [UInt8], into out: inout [UInt8]) throws(GzipError) {
        guard !input.isEmpty else { return }
        guard !isComplete else { throw .trailingData }
        let result: GzipError? = input.withUnsafeBytes { raw in
            stream.pointee.next_in = UnsafeMutablePointer(mutating: raw.baseAddress!.assumingMemoryBound(to: Bytef.self))
            stream.pointee.avail_in = uInt(raw.count)
            return output.withUnsafeMutableBufferPointer { buffer in
                while true {
                    stream.pointee.next_out = buffer.baseAddress
                    stream.pointee.avail_out = uInt(buffer.count)
                    let status = inflate(stream, Z_NO_FLUSH)
                    let produced = buffer.count - Int(stream.pointee.avail_out)
                    out.append(contentsOf: buffer[0..<produced])
                    switch status {
                    case Z_STREAM_END:
                        isComplete = true
                        return stream.pointee.avail_in > 0 ? GzipError.trailingData : nil
                    case Z_OK:
                        if stream.pointee.avail_in == 0 && stream.pointee.avail_out != 0 { return nil }
                    case Z_BUF_ERROR:
                        return nil
                    default:
                        let message = stream.pointee.msg.map { String(cString: $0) } ?? "zlib error \(status)"
                        return GzipError.corrupt(message)
                    }
                }
            }
        }
        if let result { throw result }
    }

    /// Decompresses `input` and returns what it yields.
    package func decompress(_ input: [UInt8]) throws(GzipError) -> [UInt8] {
        var out: [UInt8] = []
        try decompress(input, into: &out)
        return out
    }

    /// Throws ``GzipError/truncated`` unless the whole stream, trailer included, was read.
    package func finish() throws(GzipError) {
        guard isComplete else { throw .truncated }
    }

    /// Decompresses a whole gzip buffer.
    package static func decompress(_ bytes: [UInt8]) throws(GzipError) -> [UInt8] {
        let decompressor = try GzipDecompressor()
        let out = try decompressor.decompress(bytes)
        try decompressor.finish()
        return out
    }
}
