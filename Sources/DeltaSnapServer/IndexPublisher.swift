import Crypto
import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import NIOCore

/// Builds, signs and keeps the document served at `GET /v1/index`.
///
/// It is rebuilt when a head or floor changes and re-signed when a quarter of its lifetime
/// has passed, so a client always gets an index that is current and far from expiry, while
/// a shared cache sees a new document (and a new `ETag`) only then. Every entry is read from
/// the store in one read transaction, so a digest always belongs to the token next to it.
final class IndexPublisher: @unchecked Sendable {
    struct Published: Sendable {
        /// Which heads it was built from: "name token floor" per collection.
        var key: [String]
        var issued: Int64
        var document: ByteBuffer
        var etag: String
    }

    private let lock = NSLock()
    private let keys: [IndexSigningKey]
    private let lifetime: Int64
    private let excluded: Set<String>
    private var published: Published?

    init(keys: [IndexSigningKey], lifetime: Int64, excluded: Set<String>) {
        self.keys = keys
        self.lifetime = lifetime
        self.excluded = excluded
    }

    /// The current document; `heads` are the heads the server answers polls with.
    func current(heads: [CollectionHead], store: any CollectionStore, now: Int64) async throws -> Published {
        let key = heads.filter { !excluded.contains($0.name) }.map { "\($0.name) \($0.token) \($0.floor)" }
        if let published = lock.withLock({ published }), published.key == key, now - published.issued < lifetime / 4 {
            return published
        }
        let built = try await build(store: store, now: now)
        lock.withLock {
            // Two requests may build at once; keep the newer one.
            if published == nil || published!.issued <= built.issued { published = built }
        }
        return built
    }

    private func build(store: any CollectionStore, now: Int64) async throws -> Published {
        let published = try await store.publishedState { [excluded] in !excluded.contains($0) }
        let index = SignedIndex(sequence: published.sequence, issued: now, expires: now + lifetime, entries: published.entries)
        let key = published.entries.map { "\($0.collection) \($0.token) \($0.floor)" }
        let document = index.signed(with: keys).document
        let etag = "\"" + SHA256.hash(data: document).prefix(12).map { String(format: "%02x", $0) }.joined() + "\""
        return Published(key: key, issued: now, document: ByteBuffer(bytes: document), etag: etag)
    }
}
