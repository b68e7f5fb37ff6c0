import DeltaSnapCore
import DeltaSnapTrust

/// Where a reviewed collection's unpublished states and its review's bookkeeping live in a
/// store: partitions of reserved collections (`deltasnap-review-…`), so both stores keep them
/// with the machinery every collection has — versions, one-transaction imports, tokens of
/// their own — and no listing shows them (partitions are never listed). The server answers
/// `404` to any request that names a reserved collection; only the review endpoints reach them.
///
/// ```swift
/// try ReviewPaths.workspace(of: "sets/8271")   // "deltasnap-review-work/sets:8271"
/// ReviewPaths.isReserved("deltasnap-review-log/catalogue")   // true
/// ```
package enum ReviewPaths {
    /// Names no collection of an app may start with.
    package static let reservedPrefix = "deltasnap-review-"
    /// The review settings (which collections are reviewed, by whom): one record per collection.
    package static let settings = "deltasnap-review-settings/rules"

    static let workspaceCollection = ReviewWorkspace.collection
    static let requestCollection = "deltasnap-review-request"
    static let logCollection = "deltasnap-review-log"
    /// Before the split into replaced and added values: one `{"before":…,"id":…}` per change.
    static let legacyChangesCollection = "deltasnap-review-changes"
    static let replacedCollection = "deltasnap-review-replaced"
    static let addedCollection = "deltasnap-review-added"
    /// Every request waiting for a decision, whatever its path: one record per path (its id),
    /// so the operator's console lists them without reading millions of partitions' logs.
    static let queue = "deltasnap-review-queue/pending"

    /// Whether `path` (`NAME` or `NAME/KEY`) belongs to the reserved collections.
    package static func isReserved(_ path: String) -> Bool {
        path.hasPrefix(reservedPrefix)
    }

    /// Whether `path` is review bookkeeping no reader ever gets — a frozen request, a log, a
    /// publication's changes — so a store need not maintain its state digest (LtHash16, the
    /// most expensive part of writing a record: an approval writes a change record per record).
    /// A workspace keeps its digest: a preview device reads it as published.
    package static func keepsNoDigest(_ path: String) -> Bool {
        path == queue
            || [requestCollection, logCollection, legacyChangesCollection, replacedCollection, addedCollection].contains { path.hasPrefix($0 + "/") }
    }

    /// The path whose workspace `path` is (`deltasnap-review-work/sets:8271` → `sets/8271`), or
    /// nil for a path that is no workspace (or one named by a hash: too long to preview).
    package static func published(ofWorkspace path: String) -> String? {
        ReviewWorkspace.published(of: path)
    }

    /// Where a writer's `path` is: its workspace when its collection is reviewed by `settings`.
    package static func target(of path: String, settings: [String: ReviewSettings]) -> String {
        guard let name = CollectionPath(path)?.name, settings[name] != nil else { return path }
        return workspace(of: path)
    }

    /// The editable state of `path`: where writes to a reviewed collection go.
    package static func workspace(of path: String) -> String { "\(workspaceCollection)/\(key(of: path))" }
    /// The state frozen when review was requested: what an approval publishes.
    package static func request(of path: String) -> String { "\(requestCollection)/\(key(of: path))" }
    /// The review's audit log: one record per step.
    package static func log(of path: String) -> String { "\(logCollection)/\(key(of: path))" }
    /// The values publication `sequence` (the log entry that made it) replaced, as they were:
    /// with ``added(of:publication:)``, what a rollback restores from.
    package static func replaced(of path: String, publication sequence: Int) -> String {
        "\(replacedCollection)/\(key(of: path)).\(sequence)"
    }

    /// The new values of the ids publication `sequence` brought (absent or hidden before it).
    package static func added(of path: String, publication sequence: Int) -> String {
        "\(addedCollection)/\(key(of: path)).\(sequence)"
    }

    /// What a publication changed as builds before ``replaced(of:publication:)`` kept it: one
    /// `{"before":…,"id":…}` per id (`null`: absent). Read by rollbacks, never written.
    static func legacyChanges(of path: String, publication sequence: Int) -> String {
        "\(legacyChangesCollection)/\(key(of: path)).\(sequence)"
    }

    /// A partition key naming `path`: `NAME` or `NAME:KEY` (`:` is in no collection name, so
    /// the two never meet); a path too long for a key (128 bytes, with room for a publication
    /// number) is named by its SHA-256 instead.
    static func key(of path: String) -> String {
        let key = path.replacingOccurrences(of: "/", with: ":")
        if key.utf8.count <= 100 { return key }
        return "h." + String(AttachmentVerifier.sha256(of: Array(path.utf8)).prefix(48))
    }
}
