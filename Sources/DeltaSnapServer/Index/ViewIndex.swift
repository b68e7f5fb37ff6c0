import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird

/// The one owner of `GET /v1/index`'s documents: who a caller is for the index, the
/// document they see now (the public index, or their view), whether memory alone has it,
/// and whether a client already holds it. The router, the fast path, held requests and the
/// byte-level handler all ask here, so each of these is decided once (re-signing is
/// ``IndexPublisher/isFresh(_:now:)``, heads are ``HeadCache``'s).
///
/// ```swift
/// let caller = index.caller(authorization: request.headerFields[.authorization])   // Principal??
/// if case .some(let caller) = caller, let document = index.fromMemory(for: caller),
///    ViewIndex.holds(ifNoneMatch, document) { /* 304 */ }
/// ```
final class ViewIndex: Sendable {
    /// A document as served: its bytes, `ETag` and what it was built from.
    typealias Document = IndexPublisher.Published

    private let publication: IndexPublisher
    private let heads: HeadCache
    private let accessControl: AccessControl
    private let memberships: MembershipDirectory
    private let store: any StoreReader
    /// The headers of a view's answers, and of the public index's.
    let viewHeaders: IndexHeaders
    let publicHeaders: IndexHeaders

    init(
        publication: IndexPublisher, heads: HeadCache, accessControl: AccessControl, memberships: MembershipDirectory, store: any StoreReader,
        maxAge: Int
    ) {
        self.publication = publication
        self.heads = heads
        self.accessControl = accessControl
        self.memberships = memberships
        self.store = store
        viewHeaders = IndexHeaders(isView: true, maxAge: maxAge)
        publicHeaders = IndexHeaders(isView: false, maxAge: maxAge)
    }

    /// `Content-Type` and `Cache-Control` of every answer to `caller` (nil: the public index).
    func headers(for caller: Principal?) -> IndexHeaders {
        caller == nil ? publicHeaders : viewHeaders
    }

    // MARK: - Whether a client holds a document

    /// Whether a client that sent `ifNoneMatch` (or `?etag=`) holds `document`: the one
    /// comparison every path makes. The common poll sends the `ETag` back as it received
    /// it, which one string comparison settles before any parsing.
    static func holds(_ ifNoneMatch: String?, _ document: Document) -> Bool {
        guard let ifNoneMatch else { return false }
        return ifNoneMatch == document.etag || ConditionalRequest(ifNoneMatch: ifNoneMatch, ifModifiedSince: nil).matches(entityTag: document.etag)
    }

    // MARK: - Who is asking

    /// Who a request to `/v1/index` is, from its `Authorization` value (nil: none sent): nil
    /// for the public index, the user for a view; `.none` when memory cannot tell (an
    /// unknown or bad token: the router decides, and answers its error).
    func caller(authorization header: String?) -> Principal?? {
        if accessControl.policy.indexIgnoresTokens { return .some(nil) }
        guard let header else { return .some(nil) }
        guard let token = AccessControl.bearerToken(header), let principal = accessControl.knownPrincipal(token) else { return .none }
        return .some(principal.isAnonymous ? nil : principal)
    }

    /// Who the router's request is: the user for a view, nil for the public index (a token
    /// the policy ignores counts as none). Throws the token's error.
    func caller(of request: Request) async throws -> Principal? {
        if accessControl.policy.indexIgnoresTokens { return nil }
        let principal = try await accessControl.principal(of: request)
        return principal.isAnonymous ? nil : principal
    }

    // MARK: - The document a caller sees

    /// The document `caller` sees now (nil: the public index), built and signed only when a
    /// head it lists changed or it is due for re-signing.
    func current(for caller: Principal?) async throws -> Document {
        let now = Int64(Date().timeIntervalSince1970)
        guard let principal = caller else {
            return try await publication.current(key: publicHeads.map(EntryKey.init), subject: nil, slot: "", dependencies: nil, store: store, now: now)
        }
        let slot = Self.slot(of: principal)
        let dependencies: ViewDependencies
        switch kept(slot: slot, principal: principal, now: now, patching: true) {
        case .current(let document): return document
        case .moved(let moved): dependencies = moved
        case .none: dependencies = try await viewHeads(of: principal)
        }
        return try await publication.current(
            key: dependencies.listedKeys, subject: principal.subject, slot: slot, dependencies: dependencies, store: store, now: now)
    }

    /// The document `caller` sees now when memory alone has it (nil: the public index),
    /// without waiting or reading: what the fast path answers and parks requests on.
    func fromMemory(for caller: Principal?) -> Document? {
        let now = Int64(Date().timeIntervalSince1970)
        guard let principal = caller else { return publication.freshPublic(heads: publicHeads, now: now) }
        guard case .current(let document) = kept(slot: Self.slot(of: principal), principal: principal, now: now, patching: false) else { return nil }
        return document
    }

    // MARK: - Kept views

    /// Views are kept per subject and claims: another token of the same user may name other
    /// partitions in its claims.
    private static func slot(of principal: Principal) -> String {
        principal.claims.map {
            "\($0.sub.value)\u{0}\(($0.read ?? []).joined(separator: ","))\u{0}\(($0.write ?? []).joined(separator: ","))" + ($0.preview == true ? "\u{0}preview" : "")
        } ?? principal.subject
    }

    /// What memory has of the view kept under a slot.
    private enum Kept {
        /// The document: nothing it was built from changed, and it needs no re-signing.
        case current(Document)
        /// What it depends on and lists now: some of its heads moved, or its document is due
        /// for re-signing, but what it lists is still decided.
        case moved(ViewDependencies)
        /// Nothing kept, or what the view lists must be decided again.
        case none
    }

    /// The view kept under `slot` for `principal`, as far as memory can tell. Who may read
    /// what depends on names, rules, claims and memberships, never on a token, so while the
    /// caller's memberships partition did not move and no head appeared or left, the view
    /// lists the same collections and partitions, each at its new head: a changed view of a
    /// thousand partitions is decided without a pass over the rules, and with no read.
    /// Without `patching` (the fast path, which only answers what is current), a view that
    /// changed is `.none` at once.
    private func kept(slot: String, principal: Principal, now: Int64, patching: Bool) -> Kept {
        guard let kept = publication.kept(for: slot), var dependencies = kept.dependencies else { return .none }
        let fresh = publication.isFresh(kept, now: now)
        switch heads.standing(of: dependencies) {
        case .changed:
            return .none
        case .holds(let at):
            // Checked in full: the next poll compares one number until another head changes.
            if at != dependencies.heldAt { publication.noteStillHolds(slot: slot, at: at) }
            if fresh { return .current(kept) }
            guard patching else { return .none }
            dependencies.heldAt = at
            return .moved(dependencies)
        case .moved(let moved, let at):
            guard patching else { return .none }
            let membershipsPartition = memberships.partition(of: principal.subject)?.description
            for (position, head) in moved {
                guard dependencies.heads[position].name != membershipsPartition else { return .none }
                dependencies.heads[position].token = head.token
                dependencies.heads[position].floor = head.floor
            }
            dependencies.heldAt = at
            return .moved(dependencies)
        }
    }

    /// The heads the public index lists: every collection anyone may read (no partition).
    private var publicHeads: [CollectionHead] {
        let policy = accessControl.policy
        return heads.all.map(\.head).filter { head in
            CollectionPath(head.name).map { $0.key == nil && policy.isPublicRead($0) } ?? false
        }
    }

    /// What `principal` may read: the collections (public, and private ones their token
    /// names), their own partitions, the partitions their memberships and claims name.
    /// Partitions of public partitioned collections are not listed unless named so: there
    /// may be millions.
    /// The dependencies are every head it looked at, listed or not (a partition that does not
    /// exist yet too): while they hold, the view is the same.
    private func viewHeads(of principal: Principal) async throws -> ViewDependencies {
        // Taken before any head is read: a change while the view is built is seen by the next poll.
        let heldAt = heads.changes
        let collections = heads.all
        var dependencies = ViewDependencies(heads: [], collectionCount: collections.count, heldAt: heldAt)
        var listedCollections: [Int] = []
        let previews = principal.claims?.preview == true ? accessControl.policy.rules.reviewed : [:]
        // A preview device's view lists a reviewed collection's workspace in its place. The
        // view depends on both heads, each where ``ViewDependencies/position(of:)`` finds it
        // by name: the collection's among the collections, the workspace's (a partition of
        // the reserved collection) among the partitions — else a workspace write or an
        // approval would never be seen to move the view (issue 45).
        var partitionRun: [(name: String, token: ServerToken?, floor: UInt64, listed: Bool)] = []
        for served in collections {
            let head = served.head
            dependencies.heads.append((head.name, head.token, head.floor))
            guard let path = CollectionPath(head.name) else { continue }
            let readable = try await accessControl.mayRead(path, as: principal, memberships: memberships)
            if previews[head.name] != nil {
                let name = ReviewPaths.workspace(of: head.name)
                let workspace = try await heads.head(of: name, store: store)
                partitionRun.append((name, workspace?.token, workspace?.floor ?? 0, readable && workspace != nil))
                if workspace != nil { continue }
            }
            if readable { listedCollections.append(dependencies.heads.count - 1) }
        }
        var candidates = Set<String>()
        // Read once for every candidate below, not once per candidate.
        let roles = principal.claims == nil ? [:] : try await memberships.roles(of: principal.subject)
        if let claims = principal.claims {
            for (name, rule) in accessControl.policy.rules.collections where rule.partitioned {
                if let own = CollectionPath(name: name, key: principal.subject) { candidates.insert(own.description) }
            }
            candidates.formUnion(roles.keys)
            candidates.formUnion(((claims.read ?? []) + (claims.write ?? [])).filter(CollectionPath.isPartition))
        }
        candidates.subtract(partitionRun.map(\.name))
        let candidateHeads = try await heads.heads(of: Array(candidates), store: store)
        for name in candidates {
            let head = candidateHeads[name]
            var listed = false
            if head != nil, let path = CollectionPath(name) {
                listed = try await accessControl.mayRead(path, as: principal, memberships: memberships, roles: roles)
            }
            partitionRun.append((name, head?.token, head?.floor ?? 0, listed))
        }
        partitionRun.sort { $0.name.utf8Precedes($1.name) }
        var listedPartitions: [Int] = []
        for entry in partitionRun {
            dependencies.heads.append((entry.name, entry.token, entry.floor))
            if entry.listed { listedPartitions.append(dependencies.heads.count - 1) }
        }
        // Both lists are in name order already: merged, not sorted again.
        let looked = dependencies.heads
        dependencies.listed = Self.merged(listedCollections, listedPartitions) { looked[$0].name }
        return dependencies
    }

    /// Two lists in name order (UTF-8), as one.
    static func merged<T>(_ a: [T], _ b: [T], name: (T) -> String) -> [T] {
        var out: [T] = []
        out.reserveCapacity(a.count + b.count)
        var (i, j) = (0, 0)
        while i < a.count && j < b.count {
            if name(b[j]).utf8Precedes(name(a[i])) {
                out.append(b[j])
                j += 1
            } else {
                out.append(a[i])
                i += 1
            }
        }
        out += a[i...]
        out += b[j...]
        return out
    }
}
