import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird

/// What the server keeps in memory per collection, so a `304` never touches SQLite.
struct ServedHead: Sendable {
    var head: CollectionHead
    /// `ETag`, `Last-Modified`, `Cache-Control` and `Vary`, ready to send.
    var validatorHeaders: HTTPFields
    /// The status line and ``validatorHeaders`` of a `304`, encoded once per version for
    /// ``RawPollHandler`` (which adds `Date`, maybe `X-Request-Id`, and the empty line).
    var encodedNotModifiedHead: [UInt8]
    /// The `ETag` value, quoted: compared as a plain string on every poll.
    var etag: String

    init(head: CollectionHead) {
        self.head = head
        etag = "\"\(head.token)\""
        validatorHeaders = [
            .eTag: etag,
            .lastModified: head.lastModified,
            .cacheControl: "no-cache",
            .vary: "Accept-Encoding, If-None-Match, If-Modified-Since",
        ]
        var encoded = Array("HTTP/1.1 304 Not Modified\r\n".utf8)
        for field in validatorHeaders {
            encoded.append(contentsOf: "\(field.name.rawName): \(field.value)\r\n".utf8)
        }
        encodedNotModifiedHead = encoded
    }

    /// The common poll, checked before any parsing: the client sends back the current
    /// `ETag` exactly as it received it.
    func isCurrent(ifNoneMatch: String?) -> Bool {
        ifNoneMatch == etag
    }
}

/// The heads of all collections, as the server answers polls with them: installed at once
/// after the server's own commits and bodies, and replaced whenever the store reports
/// another writer's commit (``DeltaSnapStore/CollectionStore/watchForChanges(every:onChange:)``).
final class HeadCache: @unchecked Sendable {
    private let lock = NSLock()
    private var heads: [String: ServedHead] = [:]

    init(_ initial: [CollectionHead]) {
        replace(with: initial)
    }

    subscript(name: String) -> ServedHead? {
        lock.withLock { heads[name] }
    }

    /// The head of `name`: from memory, else read from `store` (a collection another
    /// instance created and the watcher has not reported yet) and kept.
    func head(of name: String, store: any CollectionStore) async throws -> CollectionHead? {
        if let served = self[name] { return served.head }
        guard let head = try await store.head(of: name) else { return nil }
        update(head)
        return head
    }

    var all: [ServedHead] {
        lock.withLock { heads.values.sorted { $0.head.name.utf8Precedes($1.head.name) } }
    }

    /// Installs a fresh read of every head. A head never moves backwards within its epoch,
    /// and a collection the read lacks is kept (collections are never deleted): the read may
    /// come from a replica behind a head this server already answered.
    func replace(with fresh: [CollectionHead]) {
        lock.withLock {
            var next = heads
            for head in fresh {
                if let current = heads[head.name], current.head.epoch == head.epoch, current.head.version > head.version
                    || (current.head.version == head.version && current.head.floor >= head.floor)
                {
                    next[head.name] = current
                } else {
                    next[head.name] = ServedHead(head: head)
                }
            }
            heads = next
        }
    }

    /// Installs a head the server just committed or read, without waiting for the watcher.
    func update(_ head: CollectionHead) {
        lock.withLock {
            // Never move a head backwards: a concurrent poll may have seen a newer one.
            if let current = heads[head.name], current.head.epoch == head.epoch, current.head.version >= head.version { return }
            heads[head.name] = ServedHead(head: head)
        }
    }
}
