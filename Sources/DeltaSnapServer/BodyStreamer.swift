import DeltaSnapCore
import DeltaSnapStore

/// Produces a full or delta body, chunk by chunk, from one read transaction.
///
/// The transaction pins one consistent state of the store for the whole body, however long
/// it takes to send, and memory stays bounded (a chunk at a time) for any collection size.
/// Owned by one response at a time.
final class BodyStreamer: @unchecked Sendable {
    let header: BodyHeader
    let head: CollectionHead
    private let pool: StorePool
    private var store: Store?
    /// Holds a prepared statement of `store`'s connection: released before the connection
    /// goes back to the pool, or finalising it later would race another request using it.
    private var cursor: RecordCursor?
    private var encoder: BodyEncoder
    private let compressor: GzipCompressor?
    private var plain: [UInt8]
    private var finished = false

    static let chunkSize = 64 * 1024

    /// Opens the read transaction and computes the header. `sinceVersion` nil means full.
    init(pool: StorePool, collection: String, sinceVersion: UInt64?, base: String?, gzipLevel: Int32?) throws {
        self.pool = pool
        let store = try pool.checkout()
        do {
            let reader = try store.beginRead()
            guard let head = try reader.head(of: collection) else { throw APIError.unknownCollection(collection) }
            self.head = head
            if let sinceVersion, let base {
                header = BodyHeader(
                    collection: collection, kind: .delta, base: base, token: head.token.description,
                    lastModified: head.lastModified, checksum: head.checksum,
                    count: try reader.changeCount(in: collection, after: sinceVersion))
                cursor = try reader.changes(in: collection, after: sinceVersion)
            } else {
                header = BodyHeader(
                    collection: collection, kind: .full, token: head.token.description,
                    lastModified: head.lastModified, checksum: head.checksum, count: head.count)
                cursor = try reader.visibleRecords(in: collection)
            }
            compressor = try gzipLevel.map { try GzipCompressor(level: $0) }
        } catch {
            cursor = nil
            store.endRead()
            pool.checkin(store)
            throw error
        }
        self.store = store
        encoder = BodyEncoder(header: header)
        plain = encoder.start()
        plain.reserveCapacity(Self.chunkSize + 4096)
    }

    deinit {
        close()
    }

    /// The next chunk of the (possibly compressed) body; nil when the body is complete.
    func nextChunk() throws -> [UInt8]? {
        guard !finished, cursor != nil else { return nil }
        while true {
            var more = true
            // Through the property, never a local copy: close() must be able to drop the last
            // reference to the statement before the connection is returned.
            while plain.count < Self.chunkSize {
                more = try cursor?.next { bytes in encoder.appendCanonical(bytes, into: &plain) } ?? false
                if !more { break }
            }
            if !more {
                encoder.finish(into: &plain)
                finished = true
                close()
            }
            var out: [UInt8]
            if let compressor {
                out = []
                compressor.compress(plain, into: &out)
                if finished { compressor.finish(into: &out) }
            } else {
                out = plain
            }
            plain.removeAll(keepingCapacity: true)
            if !out.isEmpty || finished { return out }
        }
    }

    /// The whole remaining body in one buffer (for bodies small enough to cache).
    func readAll() throws -> [UInt8] {
        var bytes: [UInt8] = []
        while let chunk = try nextChunk() { bytes.append(contentsOf: chunk) }
        return bytes
    }

    /// Ends the read transaction and returns the connection; safe to call twice.
    func close() {
        guard let store else { return }
        cursor = nil
        store.endRead()
        pool.checkin(store)
        self.store = nil
    }
}
