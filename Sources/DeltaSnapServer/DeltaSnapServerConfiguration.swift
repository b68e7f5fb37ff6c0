import DeltaSnapStore
import DeltaSnapTrust
import Foundation

/// Settings of a DeltaSnap server (the store it serves is given next to them).
public struct DeltaSnapServerConfiguration: Sendable {
    /// The bearer token the write API requires; `nil` disables writes (403).
    public var writeToken: String?
    /// The largest write body accepted (413 above).
    public var maximumWriteBodyBytes: Int
    /// Collections up to this many records keep their full gzip body in memory, built once
    /// per version; larger ones are streamed from SQLite so memory stays bounded.
    public var fullBodyCacheMaximumRecords: Int
    /// How often to look for commits made by other processes (`deltasnap import`, a
    /// `deltasnap follow` publishing a source's commits): on SQLite one `data_version` read,
    /// so often enough that a live client is not kept waiting by it.
    public var changePollInterval: Duration
    /// Per-user JWTs and private collections; its admin token is ``writeToken``.
    public var access: AccessPolicy
    /// The largest push body accepted (413 above): a batch is a few hundred writes.
    public var maximumPushBodyBytes: Int
    /// How long push results and replaced values (history) are kept.
    public var pushRetention: PushRetention
    /// Collections merged by ``MergePolicy/fork``: a pushed write whose record changed on
    /// the server since its `base` becomes a conflict copy; the others merge per field.
    public var forkCollections: Set<String>
    /// Whether the one-line request log includes `304 Not Modified` answers (most of the
    /// traffic, and no news); every other answer is logged at `info`.
    public var logNotModified: Bool
    /// Compaction run by the server on a schedule; nil leaves it to `deltasnap compact`.
    public var compaction: CompactionSchedule?
    /// Keys that sign `GET /v1/index` (several while a key is rotated); empty: the index
    /// is served unsigned, still telling which collections changed.
    public var signingKeys: [IndexSigningKey]
    /// Seconds a shared cache may serve the index without asking (`max-age`).
    public var indexMaxAge: Int
    /// Seconds from signing until an index expires; it is re-signed well before.
    public var indexLifetime: Int
    /// Where the `request` line of each answer is written, formatted straight into the
    /// buffer (`deltasnap serve` passes its ``BufferedLogOutput``); nil sends it through the
    /// server's swift-log `Logger` like every other line.
    public var requestLogOutput: BufferedLogOutput?
    /// How many partitions' heads are kept in memory (the ones in use): a store may hold
    /// millions, read one by one on demand; every collection's head is always kept.
    public var partitionHeadCapacity = 100_000
    /// Requests `GET /v1/index?wait=` may hold at once; one more is answered `503` with
    /// `Retry-After`.
    public var maximumWaiters = 10_000
    /// Bytes of versions kept while clients page through them (docs/PROTOCOL.md §8.6); a
    /// larger version is paged from the store, one page at a time, while it is the head.
    public var pagingBudgetBytes = 64 << 20
    /// The largest attachment accepted (`413` above; `Upload-Limit: max-size`).
    public var maximumAttachmentBytes: UInt64 = 1 << 30
    /// Seconds an unfinished resumable upload is kept from its start.
    public var uploadLifetime: Int64 = 24 * 3600
    /// Commits closer together than this wake a waiting request once (the first at once,
    /// the rest at the end of the interval).
    public var waitDebounce: Duration = .milliseconds(50)
    /// Serve the operator's console at `/console/` and its admin-only JSON at `/v1/console/`.
    public var console = false
    /// Timeouts and the connection cap of ``DeltaSnapAPI/httpServer(logger:)`` (by default
    /// derived from the process's open-file limit when the service is made).
    public var connections = ConnectionLimits.forThisProcess()

    public init(
        writeToken: String? = nil, maximumWriteBodyBytes: Int = 32 * 1024 * 1024,
        fullBodyCacheMaximumRecords: Int = 100_000, changePollInterval: Duration = .milliseconds(20),
        access: AccessPolicy = AccessPolicy(), maximumPushBodyBytes: Int = 1024 * 1024, pushRetention: PushRetention = PushRetention(),
        logNotModified: Bool = false, compaction: CompactionSchedule? = nil,
        signingKeys: [IndexSigningKey] = [], indexMaxAge: Int = 30, indexLifetime: Int = 24 * 3600,
        requestLogOutput: BufferedLogOutput? = nil, forkCollections: Set<String> = []
    ) {
        self.requestLogOutput = requestLogOutput
        self.forkCollections = forkCollections
        self.writeToken = writeToken
        self.maximumWriteBodyBytes = maximumWriteBodyBytes
        self.fullBodyCacheMaximumRecords = fullBodyCacheMaximumRecords
        self.changePollInterval = changePollInterval
        self.access = access
        self.maximumPushBodyBytes = maximumPushBodyBytes
        self.pushRetention = pushRetention
        self.logNotModified = logNotModified
        self.compaction = compaction
        self.signingKeys = signingKeys
        self.indexMaxAge = max(1, indexMaxAge)
        self.indexLifetime = max(60, indexLifetime)
    }
}
