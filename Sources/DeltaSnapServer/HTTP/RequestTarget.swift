import DeltaSnapCore
import DeltaSnapStore
import Foundation

/// The server's URL grammar (docs/PROTOCOL.md §3): what a request's path names, stated once.
/// Every layer that reads a path uses it — the raw poll handler (``PollRequestHead``), the
/// fast path before the router, the informational responder, and the router's handlers,
/// whose `:name` and `:key` parameters it decodes (``collectionPath(name:key:)``) — so a
/// path means the same thing whichever layer answers it.
///
/// ```swift
/// RequestTarget(path: "/v1/collections/items/partitions/alice")    // .collection(items/alice)
/// RequestTarget(path: "/v1/collections/items/attachments/<64 hex>") // .attachment(items, sha256: …)
/// RequestTarget(path: "/v1/collections/items?x=1")                  // .other: a query is the router's
/// ```
enum RequestTarget: Equatable {
    /// `/v1/index`: the public index, or the caller's view.
    case index
    /// `/v1/collections/NAME` or `/v1/collections/NAME/partitions/KEY`: the poll endpoint.
    case collection(CollectionPath)
    /// `…/attachments/SHA256` of a collection or partition: a download or upload.
    case attachment(CollectionPath, sha256: String)
    /// `/v1/uploads/TOKEN`: a resumable upload's own URL.
    case upload(token: String)
    /// Anything else — another endpoint, a query, a name that does not decode or is reserved:
    /// the router matches it or refuses it with its own error.
    case other

    private static let collections = "/v1/collections/"
    private static let uploads = "/v1/uploads/"

    /// Parses a request target (an origin-form path, possibly with a query).
    init(path: some StringProtocol) {
        let path = Substring(path)
        if path == "/v1/index" {
            self = .index
        } else if path.hasPrefix(Self.uploads) {
            let token = String(path.dropFirst(Self.uploads.count))
            self = AttachmentUpload.isToken(token) ? .upload(token: token) : .other
        } else if path.hasPrefix(Self.collections) {
            self = Self.underCollections(path.dropFirst(Self.collections.count))
        } else {
            self = .other
        }
    }

    /// What the path names past `/v1/collections/`: `NAME` or `NAME/partitions/KEY`, either
    /// optionally followed by `/attachments/SHA256`. (The raw poll handler, which has already
    /// matched that prefix in the request's bytes, starts here.)
    static func underCollections(_ rest: Substring) -> RequestTarget {
        // A query, an empty segment, anything else past those shapes is the router's.
        guard !rest.utf8.contains(UInt8(ascii: "?")) else { return .other }
        // The common poll, `/v1/collections/NAME`: no split (no array) on the 304 path.
        if !rest.utf8.contains(UInt8(ascii: "/")) {
            return (try? collectionPath(name: rest, key: nil as Substring?)).map(RequestTarget.collection) ?? .other
        }
        var segments = rest.split(separator: "/", maxSplits: 5, omittingEmptySubsequences: false)[...]
        guard let name = segments.popFirst() else { return .other }
        var key: Substring?
        if segments.first == "partitions" {
            segments.removeFirst()
            guard let partition = segments.popFirst() else { return .other }
            key = partition
        }
        guard let path = try? collectionPath(name: name, key: key) else { return .other }
        if segments.isEmpty { return .collection(path) }
        guard segments.count == 2, segments.first == "attachments", let hash = segments.last, AttachmentReference.isSHA256(String(hash)) else { return .other }
        return .attachment(path, sha256: String(hash))
    }

    /// The collection or partition that a path's `NAME` and `KEY` segments (percent-encoded)
    /// name. Review workspaces and logs are reached through the review endpoints only: their
    /// names are unknown here.
    static func collectionPath(name rawName: some StringProtocol, key rawKey: (some StringProtocol)?) throws(APIError) -> CollectionPath {
        let raw = rawKey.map { "\(rawName)/\($0)" } ?? String(rawName)
        guard let name = percentDecoded(rawName) else { throw .badCollectionName(raw) }
        var key: String?
        if let rawKey {
            guard let decoded = percentDecoded(rawKey) else { throw .badCollectionName(raw) }
            key = decoded
        }
        guard let path = CollectionPath(name: name, key: key) else { throw .badCollectionName(raw) }
        guard !ReviewPaths.isReserved(name) else { throw .unknownCollection(path.description) }
        return path
    }

    /// `segment` percent-decoded; nil when it does not decode to UTF-8. Names and keys almost
    /// never carry a `%`: those are returned as they are, without Foundation's decoder.
    static func percentDecoded(_ segment: some StringProtocol) -> String? {
        segment.utf8.contains(UInt8(ascii: "%")) ? segment.removingPercentEncoding : String(segment)
    }
}
