import DeltaSnapCore
import DeltaSnapStore
import Hummingbird

/// Where a reviewed collection's reads and writes go (docs/PROTOCOL.md §13), decided here for
/// every controller: writes to its workspace, a preview device's reads from it.
///
/// ```swift
/// try await reviewRouting.writer.write([record], to: "catalog")   // into its workspace when reviewed
/// ```
struct ReviewRouting: Sendable {
    let gate: Gate
    let store: any CollectionStore
    let heads: HeadCache
    /// The reviewed collections' settings, by name (read once from the rules: every write and
    /// push asks).
    let reviewed: [String: ReviewSettings]

    /// What every write goes through: the store routed by ``DeltaSnapStore/ReviewRoutedStore``
    /// (a reviewed collection's write to its workspace, prepared on first use), or the store
    /// itself when nothing is reviewed.
    var writer: any StoreWriter {
        reviewed.isEmpty ? store : ReviewRoutedStore(store, settings: reviewed)
    }

    /// The workspace a preview device reads instead of `path` (PROTOCOL.md §13.6): the token's
    /// `preview` claim, on a reviewed collection whose workspace exists; nil otherwise. Its
    /// bodies state `path`'s name and its own tokens, and are never kept by a shared cache.
    func previewedName(of path: CollectionPath, for request: Request) async throws -> String? {
        guard reviewed[path.name] != nil, AccessControl.bearerToken(request) != nil else { return nil }
        // The token's claims, also where anyone may read (authorize then looks at no token).
        let principal = try await gate.accessControl.principal(of: request)
        guard principal.claims?.preview == true else { return nil }
        _ = try await gate.authorize(request, path, for: .read)
        let workspace = ReviewPaths.workspace(of: path.description)
        guard ReviewPaths.published(ofWorkspace: workspace) == path.description, try await heads.served(workspace, store: store) != nil else { return nil }
        return workspace
    }
}
