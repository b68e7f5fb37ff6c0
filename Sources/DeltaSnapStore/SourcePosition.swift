/// Where a source follower (`deltasnap follow`) stands in its source, stored with the writes
/// it produced so the two never disagree: a follower killed at any moment resumes after
/// exactly what it committed. The position is opaque to the store.
///
/// ```swift
/// try await store.importPartitions(changes, replace: false, recording: SourcePosition(follower: "pg:deltasnap_slot", position: text))
/// let resumeAt = try await store.sourcePosition(of: "pg:deltasnap_slot")
/// ```
public struct SourcePosition: Sendable, Equatable {
    /// Names the follower (one per source slot).
    public var follower: String
    /// The follower's own text (e.g. a log position and what its first copy saw).
    public var position: String

    public init(follower: String, position: String) {
        self.follower = follower
        self.position = position
    }
}

/// A source follower as the store last heard from it: when it last recorded a position (with
/// a publication), and how far its source's log ran ahead of it when it last measured.
public struct SourceFollowerStatus: Sendable, Equatable {
    public var follower: String
    /// Seconds since 1970.
    public var recordedAt: Int64
    /// The bytes of the source's log the follower had not confirmed yet (PostgreSQL: the
    /// slot's `pg_current_wal_lsn() - confirmed_flush_lsn`), and when that was measured; nil
    /// until it first measures.
    public var lagBytes: Int64?
    public var lagMeasuredAt: Int64?

    public init(follower: String, recordedAt: Int64, lagBytes: Int64? = nil, lagMeasuredAt: Int64? = nil) {
        self.follower = follower
        self.recordedAt = recordedAt
        self.lagBytes = lagBytes
        self.lagMeasuredAt = lagMeasuredAt
    }
}

/// One source transaction as a store writes it: the partitions (or collections) it changed,
/// and the follower's position once it is written (``StoreWriter/importTransactions(_:)``).
public struct StoreTransaction: Sendable {
    public var partitions: [PartitionRecords]
    public var position: SourcePosition?

    public init(partitions: [PartitionRecords], position: SourcePosition?) {
        self.partitions = partitions
        self.position = position
    }
}

/// One collection or partition of a streamed import: its path and its records, read once
/// (``StoreWriter/importStreams(_:replace:recording:)``).
public struct PathRecords: Sendable {
    /// `NAME` or `NAME/KEY`.
    public var path: String
    /// Each id at most once.
    public var records: RecordStream

    public init(path: String, records: RecordStream) {
        self.path = path
        self.records = records
    }
}
