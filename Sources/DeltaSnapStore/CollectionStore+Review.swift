import DeltaSnapCore
import Foundation

/// Why a review step cannot be taken; each case names the code the server answers with.
package enum ReviewError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The collection is not reviewed (no `review` in its rule).
    case notReviewed(String)
    /// A request waits for a decision already (its log sequence).
    case pending(path: String, sequence: Int)
    /// No request waits for a decision.
    case nothingPending(String)
    /// The workspace is what is published: there is nothing to review.
    case nothingToReview(String)
    /// A rollback to a version the review log cannot restore.
    case unknownVersion(path: String, version: UInt64, oldest: UInt64?)

    package var code: String {
        switch self {
        case .notReviewed: "not_reviewed"
        case .pending: "review_pending"
        case .nothingPending: "no_pending_review"
        case .nothingToReview: "nothing_to_review"
        case .unknownVersion: "unknown_version"
        }
    }

    package var description: String {
        switch self {
        case .notReviewed(let path): "\"\(path)\" is not reviewed: its rule has no review"
        case .pending(let path, let sequence): "a review of \"\(path)\" is already requested (log entry \(sequence)): approve or decline it first"
        case .nothingPending(let path): "no review of \"\(path)\" is requested"
        case .nothingToReview(let path): "the workspace of \"\(path)\" is what is published: there is nothing to review"
        case .unknownVersion(let path, let version, let oldest):
            "version \(version) of \"\(path)\" cannot be restored: " + (oldest.map { "the review log reaches back to version \($0)" } ?? "nothing was published through review yet")
        }
    }
}

/// Review before publish (docs/PROTOCOL.md §13), written once on top of ``CollectionStore``:
/// a reviewed collection's writes go to its workspace (``ReviewPaths``); a request freezes the
/// workspace; an approval publishes exactly the frozen state as one version of the collection,
/// committed then, with what it changed kept for a rollback and a line in the audit log — all
/// in one store transaction. Callers serialize the steps of one path (the server holds a lock
/// per path while a step runs).
///
/// ```swift
/// try await ReviewRoutedStore(store, settings: settings).write(records, to: "catalogue")   // to its workspace
/// try await store.requestReview(of: "catalogue", by: "alice", comment: "spring prices")
/// try await store.approveReview(of: "catalogue", by: "bob", comment: nil)
/// ```
extension CollectionStore {
    // MARK: - Settings and routing

    /// Records which collections are reviewed (what `serve --rules` states), and prepares the
    /// workspace of each reviewed collection that is not partitioned.
    package func setReviewSettings(_ settings: [String: ReviewSettings]) async throws {
        let held = try await reviewSettings()
        var records: [Record] = []
        for (name, rule) in settings where held[name] != rule { records.append(try rule.record(for: name)) }
        for name in held.keys where settings[name] == nil { records.append(Record.tombstone(id: name)) }
        if !records.isEmpty { _ = try await write(records, to: ReviewPaths.settings) }
        for name in settings.keys.sorted() where CollectionPath(name) != nil { _ = try await prepareWorkspace(of: name) }
    }

    /// The workspace of `path`, created as a copy of what is published when it does not exist.
    @discardableResult
    package func prepareWorkspace(of path: String) async throws -> String {
        let workspace = ReviewPaths.workspace(of: path)
        guard try await head(of: workspace) == nil else { return workspace }
        let copy = try await stateChange(of: workspace, toMatch: path)
        if !copy.isEmpty { _ = try await write(copy, to: workspace) }
        return workspace
    }

    // MARK: - Steps

    /// Freezes the workspace as the state a reviewer decides on. Throws ``ReviewError``.
    package func requestReview(of path: String, by who: String, comment: String?, now: Int64 = Int64(Date().timeIntervalSince1970)) async throws -> ReviewLogEntry {
        let state = try await reviewState(of: path)
        if let pending = state.pending { throw ReviewError.pending(path: path, sequence: pending.sequence) }
        let workspace = try await prepareWorkspace(of: path)
        // Read first: the write below is refused if an import reached the workspace meanwhile,
        // so the entry's version and count describe exactly the state that is frozen.
        let version = try await head(of: workspace)?.version
        let changes = try await changes(from: path, to: workspace).changes
        guard !changes.isEmpty else { throw ReviewError.nothingToReview(path) }
        let entry = ReviewLogEntry(
            sequence: state.nextSequence, step: .request, by: who, at: now, comment: comment, version: version, changes: changes.count)
        let frozen = try await stateChange(of: ReviewPaths.request(of: path), toMatch: workspace)
        var parts = [
            PartitionRecords(path: ReviewPaths.log(of: path), records: [try entry.record()]),
            PartitionRecords(path: ReviewPaths.queue, records: [try entry.record(id: path)]),
        ]
        if !frozen.isEmpty { parts.append(PartitionRecords(path: ReviewPaths.request(of: path), records: frozen)) }
        _ = try await commit(StoreWrite([.expect(workspace, atVersion: version), .paths(parts, replace: false)]))
        return entry
    }

    /// Publishes exactly the frozen request as one new version of `path`, keeps what it
    /// changed, and logs it — one transaction. Throws ``ReviewError/nothingPending(_:)``.
    package func approveReview(of path: String, by who: String, comment: String?, now: Int64 = Int64(Date().timeIntervalSince1970)) async throws -> ReviewLogEntry {
        let state = try await reviewState(of: path)
        guard state.pending != nil else { throw ReviewError.nothingPending(path) }
        let request = ReviewPaths.request(of: path)
        let published = try await head(of: path)?.version
        let source = try await head(of: request).map { (path: request, version: $0.version) }
        let changes = try await changes(from: path, to: request).changes
        return try await publish(changes, of: path, at: published, from: source, step: .approve, state: state, by: who, comment: comment, now: now)
    }

    /// Ends the pending request without publishing; the workspace stays as it is.
    package func declineReview(of path: String, by who: String, comment: String?, now: Int64 = Int64(Date().timeIntervalSince1970)) async throws -> ReviewLogEntry {
        let state = try await reviewState(of: path)
        guard let pending = state.pending else { throw ReviewError.nothingPending(path) }
        let entry = ReviewLogEntry(sequence: state.nextSequence, step: .decline, by: who, at: now, comment: comment, version: pending.version)
        _ = try await importPartitions([
            PartitionRecords(path: ReviewPaths.log(of: path), records: [try entry.record()]),
            PartitionRecords(path: ReviewPaths.queue, records: [Record.tombstone(id: path)]),
        ], replace: false)
        return entry
    }

    /// Publishes a new version equal to published version `version` — or, with `ids`, those
    /// records only as they were then — and brings the workspace's copies of them back too.
    /// A request waiting for a decision is withdrawn by it (PROTOCOL.md §13): it leaves the
    /// queue, and the rollback's entry names it (`withdrewRequest`).
    /// Throws ``ReviewError/unknownVersion(path:version:oldest:)`` for a version the review log
    /// cannot restore (from before the first publication through review).
    package func rollbackReview(
        of path: String, to version: UInt64, ids: [String]?, by who: String, comment: String?, now: Int64 = Int64(Date().timeIntervalSince1970)
    ) async throws -> ReviewLogEntry {
        let state = try await reviewState(of: path)
        let publications = state.log.filter { $0.published && $0.version != nil }
        let oldest = publications.first?.previousVersion
        let current = try await head(of: path)?.version ?? 0
        guard let oldest, version >= oldest, version <= current else {
            throw ReviewError.unknownVersion(path: path, version: version, oldest: oldest)
        }
        // Each record as it was at `version`: its value before the first publication after it.
        var restored: [String: Record?] = [:]
        let wanted = ids.map(Set.init)
        for publication in publications.reversed() where publication.version! > version {
            for record in try await visibleRecords(of: ReviewPaths.replaced(of: path, publication: publication.sequence))
            where wanted?.contains(record.id) ?? true {
                restored[record.id] = .some(record)
            }
            for record in try await visibleRecords(of: ReviewPaths.added(of: path, publication: publication.sequence))
            where wanted?.contains(record.id) ?? true {
                restored[record.id] = .some(nil)
            }
            for record in try await visibleRecords(of: ReviewPaths.legacyChanges(of: path, publication: publication.sequence)) {
                guard wanted?.contains(record.id) ?? true, let before = Self.legacyBefore(record) else { continue }
                restored[record.id] = .some(before)
            }
        }
        let published = try await head(of: path)?.version
        var changes: [RecordChange] = []
        for (id, value) in restored.sorted(by: { $0.key.utf8Precedes($1.key) }) {
            if let change = RecordChange(before: try await record(id, in: path), after: value) { changes.append(change) }
        }
        return try await publish(
            changes, of: path, at: published, from: nil, step: .rollback, state: state, by: who, comment: comment, now: now, restoring: version,
            ids: ids, alsoTo: ReviewPaths.workspace(of: path))
    }

    // MARK: - Internals

    /// Writes `changes` (read from `path` at version `published`; with `source`, each new value
    /// as that path holds it) to `path` as one version, what they replaced (for rollbacks), and
    /// the log entry, in one transaction (``CollectionStore/publish(_:)``); `alsoTo` gets the
    /// same new values (a rollback's workspace).
    private func publish(
        _ changes: [RecordChange], of path: String, at published: UInt64?, from source: (path: String, version: UInt64)?, step: ReviewStep,
        state: ReviewState, by who: String, comment: String?, now: Int64, restoring restoredVersion: UInt64? = nil, ids: [String]? = nil,
        alsoTo extra: String? = nil
    ) async throws -> ReviewLogEntry {
        let previous = published ?? 0
        let sequence = state.nextSequence
        // Versions count up by one per commit, and only review steps commit to `path`.
        let withdrawn = step == .rollback ? state.pending?.sequence : nil
        let entry = ReviewLogEntry(
            sequence: sequence, step: step, by: who, at: now, comment: comment, version: changes.isEmpty ? nil : previous + 1,
            previousVersion: previous, changes: changes.count, restoredVersion: restoredVersion, restoredIDs: ids, withdrewRequest: withdrawn)
        var alongside = [PartitionRecords(path: ReviewPaths.log(of: path), records: [try entry.record()])]
        if step == .approve || withdrawn != nil { alongside.append(PartitionRecords(path: ReviewPaths.queue, records: [Record.tombstone(id: path)])) }
        if let extra, !changes.isEmpty { alongside.append(PartitionRecords(path: extra, records: changes.map { $0.after ?? Record.tombstone(id: $0.id) })) }
        let results = try await self.publish(ReviewPublication(
            path: path, expectedVersion: published, changes: changes, source: source,
            replaced: ReviewPaths.replaced(of: path, publication: sequence), added: ReviewPaths.added(of: path, publication: sequence),
            alongside: alongside))
        if let made = results.first(where: { $0.collection == path })?.head?.version, made != entry.version {
            throw StoreError.busy("\"\(path)\" was written by something other than review while it was published (version \(made), not \(entry.version ?? 0))")
        }
        return entry
    }

    /// The record before a publication, from a change record as builds before the split into
    /// replaced and added values kept it (`.none` for one that is not; `.some(nil)`: it did not exist).
    private static func legacyBefore(_ record: Record) -> Record?? {
        guard let value = try? JSONReader(bytes: record.bytes).readValue(), let before = value["before"] else { return nil }
        if case .null = before { return .some(nil) }
        return (try? Record(parsing: before)).map { .some($0) }
    }

    /// The writes that make `target` hold exactly the visible records of `source`.
    private func stateChange(of target: String, toMatch source: String) async throws -> [Record] {
        try await changes(from: target, to: source).changes.map { $0.after ?? Record.tombstone(id: $0.id) }
    }

}

/// What reading a review needs: the settings, the log, the change under review, the queue,
/// the published history — a reader is enough (the console, a poll's history).
extension StoreReader {
    /// Which collections are reviewed, by name.
    package func reviewSettings() async throws -> [String: ReviewSettings] {
        var settings: [String: ReviewSettings] = [:]
        for record in try await visibleRecords(of: ReviewPaths.settings) {
            if let rule = ReviewSettings(record: record) { settings[record.id] = rule }
        }
        return settings
    }

    /// The review's log, and whether a request waits.
    package func reviewState(of path: String) async throws -> ReviewState {
        ReviewState(log: try await visibleRecords(of: ReviewPaths.log(of: path)).compactMap(ReviewLogEntry.init(record:)))
    }

    /// The change under review — the frozen request when one waits, else the workspace —
    /// against what is published, in id order after `after`, at most `limit`.
    package func reviewChanges(
        of path: String, after: String?, limit: Int
    ) async throws -> (pending: ReviewLogEntry?, changes: [RecordChange], more: Bool) {
        let pending = try await reviewState(of: path).pending
        let proposed = pending == nil ? ReviewPaths.workspace(of: path) : ReviewPaths.request(of: path)
        guard try await head(of: proposed) != nil else { return (pending, [], false) }
        let (changes, more) = try await changes(from: path, to: proposed, after: after, limit: limit)
        return (pending, changes, more)
    }

    /// The requests waiting for a decision, of every reviewed path (partitions included), in
    /// path order after `after`, at most `limit`. Requests made before this queue was kept
    /// (an older release) are not in it; the path's own log still has them.
    package func pendingReviews(after: String?, limit: Int) async throws -> [(path: String, request: ReviewLogEntry)] {
        guard try await head(of: ReviewPaths.queue) != nil else { return [] }
        return try await withPage(of: ReviewPaths.queue, after: after, limit: limit) { source in
            var found: [(path: String, request: ReviewLogEntry)] = []
            while try await source.next({ bytes in
                let record = try Record.parse(Array(bytes))
                if let entry = ReviewLogEntry(record: record) { found.append((record.id, entry)) }
            }) {}
            return found
        }
    }

    /// The values review publications (approvals, rollbacks) replaced in record `id` of `path`,
    /// newest first, at most `limit` — a reviewed collection's history: its published values
    /// change only through review, and pushes' history stays with the workspace, unpublished.
    /// `version` is the publication that had written the value, 0 when it predates the last
    /// ``reviewHistoryDepth`` publications (or the review); `replacedBy` is `"review"` (history
    /// is as public as the collection: no reviewer's name).
    package func reviewHistory(of id: String, in path: String, limit: Int) async throws -> [HistoryEntry] {
        let publications = try await reviewState(of: path).log.filter { $0.published && $0.version != nil }.suffix(Self.reviewHistoryDepth).reversed()
        var entries: [HistoryEntry] = []
        var pending: (value: Record, replacedIn: UInt64, at: Int64)?
        func settle(writtenBy version: UInt64) {
            if let kept = pending {
                entries.append(HistoryEntry(value: kept.value.bytes, version: version, replacedIn: kept.replacedIn, replacedAt: kept.at, replacedBy: "review"))
            }
            pending = nil
        }
        for publication in publications {
            guard entries.count < limit else { break }
            let replaced = try await record(id, in: ReviewPaths.replaced(of: path, publication: publication.sequence))
            let added = replaced == nil ? try await record(id, in: ReviewPaths.added(of: path, publication: publication.sequence)) : nil
            guard replaced != nil || added != nil else { continue }
            // This publication wrote the value the newer one replaced.
            settle(writtenBy: publication.version!)
            if let replaced { pending = (replaced, publication.version!, publication.at) }
        }
        if entries.count < limit { settle(writtenBy: 0) }
        return entries
    }

    /// The publications a reviewed record's history looks through, newest first: each costs
    /// up to two store reads, on an endpoint anyone who may read the collection can ask.
    package static var reviewHistoryDepth: Int { 100 }

    /// Every visible record of `path` (none when it does not exist), in id order.
    func visibleRecords(of path: String) async throws -> [Record] {
        guard try await head(of: path) != nil else { return [] }
        return try await withRecords(in: path) { source in
            var records: [Record] = []
            while try await source.next({ records.append(try Record.parse(Array($0))) }) {}
            return records
        }
    }
}
