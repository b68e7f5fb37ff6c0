import DeltaSnapCore

/// What a garbage collection of attachments did (``CollectionStore/collectAttachmentGarbage(unreferencedFor:now:)``).
package struct AttachmentGarbage: Sendable, Equatable {
    /// Blobs removed: unreferenced for longer than the grace period.
    package var removed: Int
    /// Their bytes.
    package var bytesRemoved: UInt64
    /// Blobs no record refers to yet within the grace period (an upload whose record is
    /// still on its way, a record deleted days ago): removed by a later collection.
    package var waiting: Int

    package init(removed: Int = 0, bytesRemoved: UInt64 = 0, waiting: Int = 0) {
        self.removed = removed
        self.bytesRemoved = bytesRemoved
        self.waiting = waiting
    }

    /// One line for a log or a terminal.
    package var summary: String {
        "attachments: \(removed) removed (\(bytesRemoved) bytes), \(waiting) unreferenced kept until their grace period ends"
    }

    /// The default grace period: 7 days.
    package static let defaultGraceSeconds: Int64 = 7 * 86_400
}

/// The one rule of attachment garbage collection, whichever store runs it: what refers to
/// a blob (a visible record, a value kept in history for revert), and when an unreferenced
/// blob may go — once it has been seen unreferenced for the whole grace period, and was not
/// stored again meanwhile.
///
/// ```swift
/// var sweep = AttachmentSweep(now: now, grace: grace)
/// sweep.refer(collectionID: cid, body: recordBytes)        // every record and history value
/// let plan = sweep.plan(held: [(hash, storedAt)], orphanedSince: orphans)
/// ```
package struct AttachmentSweep {
    package let now: Int64
    package let grace: Int64
    /// Each collection's (or partition's) references: hash → media type (the first seen).
    package private(set) var references: [Int64: [String: String]] = [:]
    private var referenced = Set<String>()

    package init(now: Int64, grace: Int64) {
        self.now = now
        self.grace = grace
    }

    /// Notes the references in a stored value (a visible record, a history value) of
    /// collection `collectionID`. A value that does not parse refers to nothing.
    package mutating func refer(collectionID: Int64, body: [UInt8]) {
        guard let value = try? JSONReader(bytes: body).readValue(),
              let found = try? AttachmentReference.references(in: value)
        else { return }
        for reference in found {
            referenced.insert(reference.sha256)
            if references[collectionID]?[reference.sha256] == nil { references[collectionID, default: [:]][reference.sha256] = reference.type }
        }
    }

    /// What to do with the blobs held: `held` with when each was last stored, `orphanedSince`
    /// when each unreferenced one was first seen so.
    package func plan(held: [(sha256: String, storedAt: Int64)], orphanedSince: [String: Int64]) -> Plan {
        let cutoff = now - grace
        var plan = Plan()
        for (sha256, storedAt) in held where !referenced.contains(sha256) {
            if let since = orphanedSince[sha256], since <= cutoff, storedAt <= cutoff {
                plan.remove.append(sha256)
            } else {
                plan.orphans[sha256] = orphanedSince[sha256] ?? now
            }
        }
        return plan
    }

    package struct Plan {
        /// Blobs to remove now.
        package var remove: [String] = []
        /// The unreferenced blobs kept, with since when they are so (every other orphan row goes).
        package var orphans: [String: Int64] = [:]
    }
}
