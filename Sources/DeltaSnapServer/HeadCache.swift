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

    init(head: CollectionHead) {
        self.head = head
        validatorHeaders = [
            .eTag: "\"\(head.token)\"",
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
}

/// The heads of all collections, refreshed after each commit (the server's own writes
/// refresh at once; other processes' imports are noticed by polling SQLite's
/// `data_version`, which changes whenever another connection commits).
final class HeadCache: @unchecked Sendable {
    private let lock = NSLock()
    private var heads: [String: ServedHead] = [:]
    private let watcher: Store
    private var lastDataVersion: Int64 = -1

    init(path: String) throws {
        watcher = try Store(path: path, readOnly: true)
        try refreshIfChanged()
    }

    subscript(name: String) -> ServedHead? {
        lock.withLock { heads[name] }
    }

    var all: [ServedHead] {
        lock.withLock { heads.values.sorted { $0.head.name.utf8Precedes($1.head.name) } }
    }

    /// Reloads every head when any connection committed since the last look.
    func refreshIfChanged() throws {
        try lock.withLock {
            let version = try watcher.dataVersion()
            guard version != lastDataVersion else { return }
            lastDataVersion = version
            let fresh = try watcher.collections()
            heads = Dictionary(uniqueKeysWithValues: fresh.map { ($0.name, ServedHead(head: $0)) })
        }
    }

    /// Installs a head the server just committed, without waiting for the poll.
    func update(_ head: CollectionHead) {
        lock.withLock {
            // Never move a head backwards: a concurrent poll may have seen a newer one.
            if let current = heads[head.name], current.head.version >= head.version { return }
            heads[head.name] = ServedHead(head: head)
        }
    }
}
