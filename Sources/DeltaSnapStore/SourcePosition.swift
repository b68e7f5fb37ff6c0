/// Where a source follower (`deltasnap follow`) stands in its source, stored with the writes
/// it produced so the two never disagree: a follower killed at any moment resumes after
/// exactly what it committed. The position is opaque to the store.
///
/// ```swift
/// try await store.importPartitions(changes, replace: false, recording: SourcePosition(follower: "pg:deltasnap_slot", position: text))
/// let resumeAt = try await store.sourcePosition(of: "pg:deltasnap_slot")
/// ```
package struct SourcePosition: Sendable, Equatable {
    /// Names the follower (one per source slot).
    package var follower: String
    /// The follower's own text (e.g. a log position and what its first copy saw).
    package var position: String

    package init(follower: String, position: String) {
        self.follower = follower
        self.position = position
    }
}

/// A source follower as the store last heard from it: when it last recorded a position (with
/// a publication), and how far its source's log ran ahead of it when it last measured.
package struct SourceFollowerStatus: Sendable, Equatable {
    package var follower: String
    /// Seconds since 1970.
    package var recordedAt: Int64
    /// The bytes of the source's log the follower had not confirmed yet (PostgreSQL: the
    /// slot's `pg_current_wal_lsn() - confirmed_flush_lsn`), and when that was measured; nil
    /// until it first measures.
    package var lagBytes: Int64?
    package var lagMeasuredAt: Int64?

    package init(follower: String, recordedAt: Int64, lagBytes: Int64? = nil, lagMeasuredAt: Int64? = nil) {
        self.follower = follower
        self.recordedAt = recordedAt
        self.lagBytes = lagBytes
        self.lagMeasuredAt = lagMeasuredAt
    }
}

/// One source transaction as a store writes it: the partitions (or collections) it changed,
/// and the follower's position once it is written (``StoreWriter/importTransactions(_:)``).
package struct StoreTransaction: Sendable {
    package var partitions: [PartitionRecords]
    package var position: SourcePosition?

    package init(partitions: [PartitionRecords], position: SourcePosition?) {
        self.partitions = partitions
        self.position = position
    }
}

/// One collection or partition of a streamed import: its path and its records, read once
/// (``StoreWriter/importStreams(_:replace:recording:)``).
package struct PathRecords: Sendable {
    /// `NAME` or `NAME/KEY`.
    package var path: String
    /// Each id at most once.
    package var records: RecordStream

    package init(path: String, records: RecordStream) {
        self.path = path
        self.records = records
    }
}
