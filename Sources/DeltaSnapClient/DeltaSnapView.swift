import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// A user's whole view — the public collections plus every partition their token may read
/// (their own, the ones their memberships name) — kept in **one** replica file.
///
/// One request to `GET /v1/index` (with the user's token) tells what changed; only the
/// partitions whose token moved are fetched, each verified and applied in its own
/// transaction, and a partition that left the view (a revoked membership) is dropped from
/// the device, its queued writes reported as refused. Nothing else is refetched.
///
/// ```swift
/// let view = try DeltaSnapView(
///     path: appSupport.appendingPathComponent("view.sqlite").path,
///     baseURL: URL(string: "https://data.example.com")!, accessToken: jwt)
/// let report = await view.sync()                        // pushes each queue, polls the view once
/// let mine = try await view.query("sets", ReplicaQuery().filter("starred", .equal, .bool(true)))
/// try await view.replica(for: "attempts/alice").insert(id: "a-42", json: #"{"score":3}"#)
/// ```
public actor DeltaSnapView {
    public let path: String
    public let baseURL: URL
    public let transport: any SyncTransport
    public let trustedKeys: [TrustedKey]
    public let timeout: Duration
    /// The user's token; its `sub` must be the subject of every signed view.
    public private(set) var accessToken: String
    /// The view's own bookkeeping (scope `""`): the index's validators and sequence.
    private let storage: ReplicaStorage
    /// Partitions opened so far (a connection each), by path.
    private var members: [String: DeltaSnapReplica] = [:]
    /// Live queries over whole collections (``observe(_:_:)``), registered with ``storage``
    /// and with every partition of their collection opened here.
    private var observations: [CrossPartitionObservation] = []
    private let observationWork = LiveQueryCountsBox()

    /// Opens (or creates) the view's file at `path` for the server at `baseURL` (its root:
    /// `https://data.example.com`, no collection path).
    public init(
        path: String, baseURL: URL, accessToken: String, transport: any SyncTransport = URLSessionTransport(),
        trustedKeys: [TrustedKey] = [], timeout: Duration = .seconds(30)
    ) throws {
        self.path = path
        self.baseURL = baseURL
        self.accessToken = accessToken
        self.transport = transport
        self.trustedKeys = trustedKeys
        self.timeout = timeout
        storage = try ReplicaStorage(path: path)
        if let server = try storage.value(for: Self.serverKey), !ReplicaBindingError.isSameServer(server, baseURL) {
            throw ReplicaBindingError.otherServer(path: path, held: server, requested: baseURL.absoluteString)
        }
    }

    /// A new token (the old one expired); the view stays.
    public func setAccessToken(_ token: String) {
        accessToken = token
        for member in members.values { Task { await member.setAccessToken(token) } }
    }

    /// The partitions (and collections) this device holds, sorted.
    public func partitions() throws -> [String] {
        try storage.heldPartitions().keys.sorted { $0.utf8Precedes($1) }
    }

    /// The replica of one partition of the view (`sets/8271`), for its reads and local
    /// writes; its writes are pushed by the view's ``sync(now:)``.
    public func replica(for partition: String) throws -> DeltaSnapReplica {
        if let open = members[partition] { return open }
        guard let path = CollectionPath(partition) else { throw InvalidCollectionName(name: partition) }
        let replica = try DeltaSnapReplica(
            path: self.path, collection: partition, url: baseURL.appendingPathComponent(String(path.urlPath.dropFirst())),
            bundledSnapshot: nil, transport: transport, retryPolicy: RetryPolicy(), timeout: timeout, accessToken: accessToken,
            pushBatchSize: 500, trustedKeys: trustedKeys, acceptingServerChange: false, scope: partition)
        members[partition] = replica
        for observation in observations where observation.collection == path.name && !observation.hasEnded {
            replica.liveQueries.add(observation)
        }
        return replica
    }

    /// The records of every partition of collection `name` the device holds, as the app
    /// sees them (local writes included), selected and ordered by `query`.
    public func query(_ name: String, _ query: ReplicaQuery = ReplicaQuery()) throws -> [JSONValue] {
        try CollectionName.validate(name)
        var results: [JSONValue] = []
        try storage.acrossPartitions(of: name) {
            try storage.query(query) { results.append(try JSONReader(bytes: Array($0)).readValue()) }
        }
        return results
    }

    /// The records ``query(_:_:)`` returns for collection `name` across every partition the
    /// device holds, now and again after every change that alters them.
    ///
    /// The first value is the current result. After that a value comes only when a committed
    /// change made the result differ: a partition pulled, written locally, rolled back after a
    /// refusal, reloaded whole, arriving in the view or dropped from it. Like
    /// ``DeltaSnapReplica/observe(_:)``, a change that cannot affect the query (another
    /// collection, a record outside its filters before and after) runs nothing.
    ///
    /// ```swift
    /// for try await starred in try await view.observe("sets", ReplicaQuery()
    ///     .filter("starred", .equal, .bool(true)).order(by: "title")) {
    ///     show(starred)       // at once, then after every sync or write that changes it
    /// }
    /// ```
    ///
    /// Throws at once what ``query(_:_:)`` throws for this query.
    public func observe(_ name: String, _ query: ReplicaQuery = ReplicaQuery()) throws -> AsyncThrowingStream<[JSONValue], any Error> {
        _ = try self.query(name, query.limit(1))
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [JSONValue].self, bufferingPolicy: .bufferingNewest(1))
        let observation = CrossPartitionObservation(collection: name, query: query, continuation: continuation, counts: observationWork)
        observations.removeAll { $0.hasEnded }
        observations.append(observation)
        storage.observers.add(observation)
        for (partition, member) in members where CollectionPath(partition)?.name == name { member.liveQueries.add(observation) }
        // Registered before the first read: a partition committing meanwhile makes it read again.
        while !observation.start(with: try self.query(name, query)) {}
        return stream
    }

    /// Re-runs and notifications of this view's ``observe(_:_:)`` queries since it was opened.
    public var observationCounts: LiveQueryCounts { observationWork.value }

    /// Pushes every partition's queued writes, then asks the server once whether the view
    /// changed, fetches what did, and drops what left it. With `waitingUpTo` seconds (1–60)
    /// the server holds the question until the view changes or the time is up (a long-poll,
    /// docs/PROTOCOL.md §11); see ``live(_:onSync:)``.
    public func sync(now: Date = Date(), waitingUpTo wait: Int? = nil) async -> ViewSyncReport {
        var report = ViewSyncReport()
        for partition in (try? storage.partitionsWithQueuedWrites()) ?? [] {
            guard let member = try? replica(for: partition) else { continue }
            report.pushes[partition] = await member.pushQueued(now: now)
        }
        let index: SignedIndex
        let etag: String?
        switch await fetchView(now: now, wait: wait) {
        case .notModified:
            report.index = .notModified
            report.held = (try? storage.heldPartitions().count) ?? 0
            return report
        case .failed(let reason, let unavailable):
            report.index = .failed(reason: reason, unavailable: unavailable)
            report.held = (try? storage.heldPartitions().count) ?? 0
            return report
        case .fetched(let fetched, let tag):
            (index, etag) = (fetched, tag)
        }
        let held = (try? storage.heldPartitions()) ?? [:]
        var complete = true
        for entry in index.entries where held[entry.collection] != entry.token {
            do {
                let outcome = try await replica(for: entry.collection).pull(toward: trustedKeys.isEmpty ? nil : entry, now: now)
                report.partitions[entry.collection] = outcome
                if case .failed = outcome { complete = false }
                if case .deferred = outcome { complete = false }
                if case .postponed = outcome { complete = false }
            } catch {
                report.partitions[entry.collection] = .failed(reason: "\(error)", retryAfter: nil)
                complete = false
            }
        }
        let listed = Set(index.entries.map(\.collection))
        for partition in held.keys.sorted() where !listed.contains(partition) && CollectionPath(partition)?.key != nil {
            members[partition] = nil
            do {
                report.dropped[partition] = try storage.drop(partition: partition)
                // Its files leave the device with its records.
                LocalAttachments(replicaPath: path, scope: partition).removeAll()
            } catch { complete = false }
        }
        report.index = .applied
        report.held = (try? storage.heldPartitions().count) ?? listed.count
        // Only a view applied in full is remembered: a partition that failed is fetched again
        // at the next sync, even if the view's ETag is unchanged then.
        if complete {
            try? storage.writeTransaction {
                try storage.setValue(etag, for: Self.etagKey)
                try storage.setValue(String(index.sequence), for: Self.sequenceKey)
                try storage.setValue(baseURL.absoluteString, for: Self.serverKey)
            }
        }
        return report
    }

    /// Live mode: waits on the server for a change to the view, syncs it, and waits again,
    /// until the calling task is cancelled (cancel it when the app goes to the background).
    /// `onSync` receives every sync that changed something (a new view, or pushed writes)
    /// or failed (the loop backs off, then tries again).
    /// Falls back to polling when held requests are cut (see ``LiveOptions``). Local writes
    /// made meanwhile are pushed by the app's own ``sync(now:waitingUpTo:)``, or by the next
    /// round.
    public func live(_ options: LiveOptions = LiveOptions(), onSync: @Sendable (ViewSyncReport) async -> Void) async {
        var loop = LiveLoop(options: options)
        await loop.run { wait in
            let report = await sync(waitingUpTo: wait)
            if report.isWorthReporting { await onSync(report) }
            switch report.index {
            case .applied: return .changed
            case .failed: return .failed
            case .notModified, .none: return .unchanged
            }
        }
    }

    private enum ViewAnswer {
        case notModified
        case fetched(SignedIndex, etag: String?)
        case failed(reason: String, unavailable: Bool)
    }

    /// `GET /v1/index` with the token and the held ETag; a new view is checked before use:
    /// with trusted keys its signature, expiry and sequence (never below the one held),
    /// and always that it is this token's view.
    private func fetchView(now: Date, wait: Int?) async -> ViewAnswer {
        let etag = try? storage.value(for: Self.etagKey)
        var url = baseURL.appendingPathComponent("v1/index")
        // A view is private: no shared cache sits between, so If-None-Match reaches the server.
        if let wait, etag != nil { url.append(queryItems: [URLQueryItem(name: "wait", value: String(wait))]) }
        let held = (try? storage.value(for: Self.sequenceKey)).flatMap { $0.flatMap { UInt64($0) } }
        let verification = IndexClient.Verification(
            trustedKeys: trustedKeys, now: Int64(now.timeIntervalSince1970), heldSequence: held, subject: .ofToken(accessToken))
        let client = IndexClient(transport: transport, accessToken: accessToken, timeout: timeout)
        switch await client.fetch(
            url, label: "view", headers: etag.flatMap { $0 }.map { ["If-None-Match": $0] } ?? [:], extraTimeout: .seconds(wait ?? 0),
            verification: verification, now: now)
        {
        case .notModified: return .notModified
        case .fetched(let index, let etag, _): return .fetched(index, etag: etag)
        case .failed(let reason, _, let unavailable, _): return .failed(reason: reason, unavailable: unavailable)
        }
    }

    static let etagKey = "viewETag"
    static let sequenceKey = "viewSequence"
    static let serverKey = "viewServer"
}

/// What one ``DeltaSnapView/sync(now:)`` did.
public struct ViewSyncReport: Sendable {
    public enum IndexOutcome: Sendable, Equatable {
        /// Not asked yet.
        case none
        /// `304`: nothing in the view changed.
        case notModified
        /// A new view was read; ``DeltaSnapView`` fetched and dropped what it names.
        case applied
        /// The view could not be had or was refused; nothing was fetched or dropped.
        case failed(reason: String, unavailable: Bool)
    }

    public var index = IndexOutcome.none
    /// Per partition with queued writes: what its push did.
    public var pushes: [String: PushReport] = [:]
    /// Per partition whose token moved: what its pull did.
    public var partitions: [String: SyncOutcome] = [:]
    /// Partitions that left the view, with the queued writes that left with them (never sent).
    public var dropped: [String: [PendingWrite]] = [:]
    /// Partitions (and collections) held after the sync.
    public var held = 0

    public init() {}

    /// Whether anything happened that an app (or `sync --watch`) would report: a new view,
    /// pushed writes, or a failure — anything but a `304` with nothing to push.
    public var isWorthReporting: Bool {
        index != .notModified || !pushes.isEmpty
    }

    /// Partitions fetched (a delta or a full body; not those dropped).
    public var changed: Int {
        partitions.values.filter { if case .applied = $0 { true } else if case .reset = $0 { true } else { false } }.count
    }
}

/// The `sub` claim of a JWT, read without verifying it (the server does): which user a
/// signed view must be for.
enum JWTSubject {
    static func of(_ token: String) -> String? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), case .string(let subject)? = (try? JSONReader(bytes: Array(data)).readValue())?["sub"] else {
            return nil
        }
        return subject
    }
}

extension DeltaSnapReplica {
    /// Pulls this partition of a view: toward `entry` (an entry of the view's index the view
    /// verified) when signed, else by its own conditional GET.
    func pull(toward entry: SignedIndex.Entry?, now: Date) async -> SyncOutcome {
        viewEntry = entry
        defer { viewEntry = nil }
        return await pull(now: now, waits: .all)
    }

    /// Pushes the queued writes alone (the view polls once for every partition afterwards).
    func pushQueued(now: Date) async -> PushReport {
        await pushPending(now: now, waits: .all)
    }
}
