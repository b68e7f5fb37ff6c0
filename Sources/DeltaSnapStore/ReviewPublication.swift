import DeltaSnapCore

/// One publication of review before publish (`CollectionStore+Review.swift`): changes read
/// from a published path and what it becomes, written by ``StoreWrite/Step/publish(_:)`` in
/// one transaction as
/// - one new version of ``path`` (each change's ``RecordChange/after``, or a tombstone);
/// - a new partition ``replaced`` with each value a change replaced (its ``RecordChange/before``,
///   where there was one), and a new partition ``added`` with the new value of each id ``path``
///   did not show — what a rollback restores from;
/// - ``alongside`` (the log entry; a rollback's workspace), as `importPartitions` writes it.
///
/// The changes were read from ``path`` at ``expectedVersion``: a store refuses with
/// ``StoreError/busy(_:)`` when ``path`` is at another version (something wrote it meanwhile),
/// so it may take each change's `before` as what it holds. With ``source`` (the frozen request),
/// each `after` is also the value ``source`` holds at ``sourceVersion``: a store may copy the
/// records from there rather than receive them (PostgreSQL does).
///
/// ```swift
/// let results = try await store.publish(ReviewPublication(
///     path: "catalogue", expectedVersion: 7, changes: changes,
///     source: (ReviewPaths.request(of: "catalogue"), 3),
///     replaced: ReviewPaths.replaced(of: "catalogue", publication: 12),
///     added: ReviewPaths.added(of: "catalogue", publication: 12),
///     alongside: [PartitionRecords(path: ReviewPaths.log(of: "catalogue"), records: [entry])]))
/// ```
package struct ReviewPublication: Sendable {
    package var path: String
    /// The version of ``path`` the changes were read against (nil: it had none).
    package var expectedVersion: UInt64?
    /// One per id, ids ascending.
    package var changes: [RecordChange]
    /// A path holding every change's `after` (and the version it was read at), when there is one.
    package var source: (path: String, version: UInt64)?
    package var replaced: String
    package var added: String
    package var alongside: [PartitionRecords]

    package init(
        path: String, expectedVersion: UInt64?, changes: [RecordChange], source: (path: String, version: UInt64)?, replaced: String,
        added: String, alongside: [PartitionRecords]
    ) {
        self.path = path
        self.expectedVersion = expectedVersion
        self.changes = changes
        self.source = source
        self.replaced = replaced
        self.added = added
        self.alongside = alongside
    }

    /// What ``path`` gets: each change's new value, or a tombstone.
    package var values: [Record] { changes.map { $0.after ?? Record.tombstone(id: $0.id) } }
    /// What ``replaced`` gets.
    package var replacedValues: [Record] { changes.compactMap(\.before) }
    /// What ``added`` gets.
    package var addedValues: [Record] { changes.filter { $0.before == nil }.compactMap(\.after) }

    /// The refusal when ``path`` is not at ``expectedVersion``.
    package func moved(to version: UInt64?) -> StoreError {
        .busy("\"\(path)\" was written by something other than review while it was published (version \(version ?? 0), not \(expectedVersion ?? 0))")
    }
}

extension ReviewPublication {
    /// What a store writes for this publication when it does not copy from ``source``, as one
    /// ``StoreWrite/Step/paths(_:replace:)`` would: ``alongside``, then (with changes) ``path``,
    /// ``replaced`` and ``added`` where they get records.
    package var partitions: [PartitionRecords] {
        var parts = alongside
        guard !changes.isEmpty else { return parts }
        parts.append(PartitionRecords(path: path, records: values))
        for (path, records) in [(replaced, replacedValues), (added, addedValues)] where !records.isEmpty {
            parts.append(PartitionRecords(path: path, records: records))
        }
        return parts
    }
}
