/// Whether a body holds the whole state of a collection or only what changed since `base`.
public enum BodyKind: String, Sendable, Equatable {
    /// Every visible record; it replaces the local collection.
    case full
    /// Records changed or hidden since the `base` token; applies on top of that token only.
    case delta
}

/// The metadata that precedes `records` in every body and snapshot (see `docs/PROTOCOL.md`).
///
/// ```swift
/// let header = BodyHeader(collection: "countries", kind: .full, base: nil,
///                         token: "5f3c9a0e12ab34cd.1", lastModified: "Sun, 22 Nov 2026 12:00:00 GMT",
///                         checksum: checksum, count: 249)
/// ```
package struct BodyHeader: Sendable, Equatable {
    /// The wire format version this code writes and reads.
    package static let currentFormat = 1

    package var format: Int
    package var collection: String
    package var kind: BodyKind
    /// The token a delta applies on; `nil` for a full body.
    package var base: String?
    /// The token of the state the body leads to (the `ETag` value without its quotes).
    package var token: String
    /// The HTTP date of that state's commit (the `Last-Modified` value).
    package var lastModified: String
    /// The ``StateChecksum`` of the whole visible state at `token`.
    package var checksum: StateChecksum
    /// How many entries `records` holds.
    package var count: Int

    package init(
        format: Int = BodyHeader.currentFormat, collection: String, kind: BodyKind, base: String? = nil,
        token: String, lastModified: String, checksum: StateChecksum, count: Int
    ) {
        self.format = format
        self.collection = collection
        self.kind = kind
        self.base = base
        self.token = token
        self.lastModified = lastModified
        self.checksum = checksum
        self.count = count
    }
}
