/// The naming of review workspaces (docs/PROTOCOL.md §13), down here because the state digest
/// (DeltaSnapTrust) needs it: a workspace's records are digested under the name of the
/// collection they will be published as, so a preview device checks a workspace against a
/// signed index entry of that name, and an approved state's digest is the workspace's.
/// `ReviewPaths` (DeltaSnapStore) builds on it.
package enum ReviewWorkspace {
    /// The reserved collection whose partitions are the workspaces.
    package static let collection = "deltasnap-review-work"
    private static let prefix = collection + "/"

    /// The path whose workspace `path` is (`deltasnap-review-work/sets:8271` → `sets/8271`), or
    /// nil for a path that is no workspace (or one named by a hash: too long to be read back).
    package static func published(of path: String) -> String? {
        // Asked for every record the state digest covers: no string is built for a path that is no workspace.
        guard path.utf8.starts(with: prefix.utf8) else { return nil }
        let key = path.dropFirst(prefix.count)
        guard !key.hasPrefix("h.") else { return nil }
        guard let colon = key.firstIndex(of: ":") else { return String(key) }
        return String(key[..<colon]) + "/" + String(key[key.index(after: colon)...])
    }
}
