import DeltaSnapCore
import DeltaSnapStore
import NIOCore

extension ByteBuffer: ByteSink {
    package mutating func append(bytes: UnsafeRawBufferPointer) { writeBytes(bytes) }
}

/// Encodes a full or delta body, chunk by chunk, from one ``RecordSource`` (one read
/// transaction of whichever store).
///
/// The transaction pins one consistent state for the whole body, however long it takes to
/// send, and memory stays bounded (a chunk at a time) for any collection size. Owned by one
/// response at a time: a streamed body hands it to its writer's task (``HandedOver``).
final class BodyStreamer {
    let header: BodyHeader
    var head: CollectionHead { source.head }
    private let source: any RecordSource
    private var encoder: BodyEncoder
    private let compressor: GzipCompressor?
    private var plain: [UInt8]
    private var finished = false
    private var closed = false

    static let chunkSize = 64 * 1024

    /// `base` is the client's token for a delta (the source then holds the changes since
    /// it), nil for a full body.
    init(source: any RecordSource, base: String?, gzipLevel: Int32?) throws {
        self.source = source
        var head = source.head
        // A workspace is served to preview devices as the collection it will be published as.
        if let published = ReviewPaths.published(ofWorkspace: head.name) { head.name = published }
        if let base {
            header = BodyHeader(
                collection: head.name, kind: .delta, base: base, token: head.token.description,
                lastModified: head.lastModified, checksum: head.checksum, count: source.count)
        } else {
            header = BodyHeader(
                collection: head.name, kind: .full, token: head.token.description,
                lastModified: head.lastModified, checksum: head.checksum, count: source.count)
        }
        compressor = try gzipLevel.map { try GzipCompressor(level: $0) }
        encoder = BodyEncoder(header: header)
        plain = encoder.start()
        plain.reserveCapacity(Self.chunkSize + 4096)
    }

    /// The next chunk of the (possibly compressed) body, in a buffer of its own; nil when
    /// the body is complete.
    func nextChunk() async throws -> ByteBuffer? {
        var chunk = ByteBuffer()
        return try await appendNextChunk(to: &chunk) ? chunk : nil
    }

    /// Appends the next chunk to `out` — compressed straight into it, no intermediate
    /// array; false (and nothing appended) once the body is complete.
    private func appendNextChunk(to out: inout ByteBuffer) async throws -> Bool {
        // Once closed, the source yields nothing: never let that pass for the body's end.
        guard !finished, !closed else { return false }
        while true {
            var more = true
            while plain.count < Self.chunkSize {
                more = try await source.next { bytes in encoder.appendCanonical(bytes, into: &plain) }
                if !more { break }
            }
            if !more {
                encoder.finish(into: &plain)
                finished = true
                await source.close()
            }
            let before = out.readableBytes
            if let compressor {
                compressor.compress(plain, into: &out)
                if finished { compressor.finish(into: &out) }
            } else {
                out.writeBytes(plain)
            }
            plain.removeAll(keepingCapacity: true)
            if out.readableBytes > before || finished { return true }
        }
    }

    /// The whole remaining body in one buffer (for bodies small enough to cache), written
    /// straight into the buffer a response sends.
    func readAll() async throws -> ByteBuffer {
        var bytes = ByteBuffer()
        while try await appendNextChunk(to: &bytes) {}
        return bytes
    }

    /// Ends the read transaction; safe to call twice.
    func close() async {
        closed = true
        await source.close()
    }
}
