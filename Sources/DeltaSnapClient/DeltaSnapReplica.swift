import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// A local, always-usable replica of one DeltaSnap collection in an SQLite file.
///
/// On first start it loads the bundled snapshot, so data is there before any network call.
/// ``sync()`` then keeps it fresh with conditional GETs: a `304` changes nothing, a delta is
/// applied on top, a full body replaces the collection — each in one verified transaction.
/// A body that cannot be applied is followed by one full fetch; if that fails too the
/// previous good state stays. The replica is never emptied or half-written by a failed sync.
///
/// ```swift
/// let replica = try DeltaSnapReplica(
///     path: appSupport.appendingPathComponent("countries.sqlite").path,
///     collection: "countries",
///     url: URL(string: "https://data.example.com/v1/collections/countries")!,
///     bundledSnapshot: Bundle.main.path(forResource: "countries", ofType: "snapshot"))
/// let andorra = try await replica.record(id: "AD")      // usable offline at once
/// try await replica.patch(id: "AD", json: #"{"capital":"Andorra la Vella"}"#)  // local-first write
/// let outcome = await replica.sync()                     // pushes the queue, then pulls
/// ```
///
/// Local writes (``put(id:json:)``, ``patch(id:json:)``, ``insert(id:json:)``,
/// ``delete(id:)``) commit to the replica at once, together with their queued write; reads
/// see them immediately. The verified server state is kept apart from them, so a pull's
/// checksum verification is as strict as for a replica that is never written to.
public actor DeltaSnapReplica {
    public let collection: String
    public let url: URL
    public let transport: any SyncTransport
    public let retryPolicy: RetryPolicy
    public let timeout: Duration
    /// The most writes one push request carries (the server takes up to 1,000).
    public let pushBatchSize: Int
    /// The bearer token sent with every request (a per-user JWT from the app's auth service).
    public private(set) var accessToken: String?
    /// What the push step of the last ``sync()`` did: accepted and refused writes.
    public private(set) var lastPushReport = PushReport()
    /// Public keys the app pins. When set, the replica syncs through the server's signed
    /// index and its cacheable URLs, and commits only data whose digest a trusted key signed
    /// (docs/PROTOCOL.md §8); several keys while one is rotated out.
    public let trustedKeys: [TrustedKey]

    let storage: ReplicaStorage
    /// The live queries of ``storage``, reachable from a ``DeltaSnapView`` that registers its
    /// cross-partition queries with each partition it opens.
    nonisolated let liveQueries: ReplicaObservers
    var state: ReplicaState
    private var continuations: [UUID: AsyncStream<SyncOutcome>.Continuation] = [:]
    private var runningSync: (task: Task<SyncOutcome, Never>, pushing: Bool, waits: WaitPolicy)?
    /// No push before this time after a failed one (in memory: a restarted app retries at
    /// once, unless the server asked it to wait: that is ``ReplicaState/serverNotBefore``).
    var pushNotBefore: Date?
    var consecutivePushFailures = 0
    /// The entry of this partition in its view's index, verified by the view
    /// (``DeltaSnapView``): a signed pull goes toward it without fetching the index again.
    var viewEntry: SignedIndex.Entry?
    /// Why the last sync failed (nil when it did not): whether trying later can help.
    public internal(set) var lastFailureKind: SyncFailureKind?
    /// How much a sync may download (``NetworkBudget/unlimited`` unless the app says otherwise).
    public private(set) var networkBudget = NetworkBudget.unlimited
    /// The update the last sync left for a larger budget, or nil.
    public private(set) var postponedUpdate: SyncBodyOverBudget?
    /// The replica's own copies of attachments, beside its file.
    let attachments: LocalAttachments
    /// The `attachments/` directory next to the bundled snapshot (`bake --attachments`), if any.
    let bundledAttachments: String?
    /// When attachments the records refer to are downloaded (``AttachmentPolicy``).
    public internal(set) var attachmentPolicy = AttachmentPolicy.eager
    /// The most bytes of cached attachments kept (least recently used go first; a file
    /// waiting for upload never goes); nil: no limit.
    public internal(set) var attachmentCacheLimit: UInt64?
    /// What the last sync did with attachments: uploads, downloads, what waits.
    public internal(set) var lastAttachmentReport = AttachmentReport()
    /// Whether the next sync must go over every reference of the index (the policy
    /// changed, or a bundled replica read in place could not keep a failed download for
    /// later); otherwise a sync looks only at the references that changed.
    var attachmentsNeedScan = false
    /// Whether this process went over every reference eagerly (a bundled replica read in
    /// place cannot remember it in its file).
    var attachmentsSettledEagerly = false

    /// Opens (or creates) the replica at `path`. When it holds no data yet and
    /// `bundledSnapshot` is given, the bundle is used first: a gzip `.snapshot` is loaded
    /// and verified (a corrupt one throws and leaves the replica empty); a `.replica` (from
    /// `deltasnap bake --replica`) is read in place until the first write copies it to
    /// `path`, so a first start costs the same for a thousand records or a million.
    ///
    /// A replica remembers the collection and the collection URL of its first sync and
    /// refuses to open for another (``ReplicaBindingError``): its queued writes belong to that
    /// server's collection. When the app's server really moved (a new host for the same
    /// data), pass `acceptingServerChange: true` once.
    public init(
        path: String, collection: String, url: URL, bundledSnapshot: String? = nil,
        transport: any SyncTransport = URLSessionTransport(), retryPolicy: RetryPolicy = RetryPolicy(),
        timeout: Duration = .seconds(30), accessToken: String? = nil, pushBatchSize: Int = 500, trustedKeys: [TrustedKey] = [],
        acceptingServerChange: Bool = false
    ) throws {
        try self.init(
            path: path, collection: collection, url: url, bundledSnapshot: bundledSnapshot, transport: transport, retryPolicy: retryPolicy,
            timeout: timeout, accessToken: accessToken, pushBatchSize: pushBatchSize, trustedKeys: trustedKeys,
            acceptingServerChange: acceptingServerChange, scope: "")
    }

    /// `scope`: `""` for a file of its own, else the partition's path in a view's file
    /// (``DeltaSnapView``), where it keeps its rows apart from the other partitions'.
    init(
        path: String, collection: String, url: URL, bundledSnapshot: String?, transport: any SyncTransport, retryPolicy: RetryPolicy,
        timeout: Duration, accessToken: String?, pushBatchSize: Int, trustedKeys: [TrustedKey], acceptingServerChange: Bool, scope: String
    ) throws {
        try CollectionPath.validate(collection)
        attachments = LocalAttachments(replicaPath: path, scope: scope)
        attachments.removeLeftovers()
        bundledAttachments = bundledSnapshot.map { (($0 as NSString).deletingLastPathComponent as NSString).appendingPathComponent("attachments") }
            .flatMap { FileManager.default.fileExists(atPath: $0) ? $0 : nil }
        self.trustedKeys = trustedKeys
        self.collection = collection
        self.url = url
        self.transport = transport
        self.retryPolicy = retryPolicy
        self.timeout = timeout
        self.accessToken = accessToken
        self.pushBatchSize = max(1, min(pushBatchSize, PushRequest.maximumMutations))
        let bundledReplica = bundledSnapshot.map(BundledReplica.isReplica) ?? false
        let opened = try ReplicaStorage.opening(path, bundledReplica: bundledSnapshot, scope: scope)
        liveQueries = opened.observers
        if let bundledSnapshot, opened.borrowed != nil {
            // First start from a bundled replica: read it in place; the first data change copies it.
            storage = opened
            state = try Self.checkBundledReplica(bundledSnapshot, storage: storage, collection: collection)
            // Its bookkeeping (kept beside it) may already bind it to a server.
            try ReplicaBindingError.check(state, path: path, collection: collection, url: url, acceptingServerChange: acceptingServerChange)
            return
        }
        storage = opened
        state = try storage.loadState()
        try ReplicaBindingError.check(state, path: path, collection: collection, url: url, acceptingServerChange: acceptingServerChange)
        if !state.hasData, let bundledSnapshot {
            if bundledReplica {
                _ = try Self.checkBundledReplica(bundledSnapshot, storage: try ReplicaStorage(borrowing: bundledSnapshot, copyingTo: path), collection: collection)
                try storage.load(fromReplica: bundledSnapshot)
                state = try storage.loadState()
            } else {
                state = try Self.loadSnapshot(bundledSnapshot, into: storage, collection: collection, state: state, trustedKeys: trustedKeys)
            }
        }
    }

    /// The state of a bundled replica, once its metadata says it is a usable bundle of this
    /// collection (O(1); ``verify()`` recomputes everything).
    private static func checkBundledReplica(_ path: String, storage: ReplicaStorage, collection: String) throws -> ReplicaState {
        let summary = try BundledReplica.summary(of: storage, path: path)
        guard summary.collection == collection else {
            throw BundledReplica.Unusable(path: path, reason: "holds collection \"\(summary.collection)\", not \"\(collection)\"")
        }
        return try storage.loadState()
    }

    /// Loads a bundled gzip snapshot. With trusted keys and the signed index `bake
    /// --signing-key` wrote next to it (`NAME.index`), the snapshot must be exactly what the
    /// index signs (its expiry is not checked: the app binary carried it), and that index's
    /// sequence becomes the floor for the network's.
    private static func loadSnapshot(
        _ path: String, into storage: ReplicaStorage, collection: String, state: ReplicaState, trustedKeys: [TrustedKey]
    ) throws -> ReplicaState {
        let reader = BodyReader(nextChunk: try ChunkSources.gunzip(try ChunkSources.file(at: path)))
        var index: SignedIndex?
        let indexPath = (path as NSString).deletingPathExtension + SignedIndex.fileExtension
        if !trustedKeys.isEmpty, let document = FileManager.default.contents(atPath: indexPath) {
            let bundled = try SignedIndex.parse(Array(document))
            try bundled.verify(trusting: trustedKeys, now: nil, heldSequence: nil)
            guard bundled.entry(for: collection) != nil else { throw TrustError.collectionNotListed(collection) }
            index = bundled
        }
        var (_, newState) = try BodyApplier(storage: storage, collection: collection)
            .apply(reader, state: state, etag: nil, lastModified: nil, expected: index?.entry(for: collection), maintainDigest: !trustedKeys.isEmpty)
        if let index {
            newState.indexSequence = index.sequence
            try storage.writeTransaction { try storage.save(newState) }
        }
        return newState
    }

    /// Sets the bearer token for later requests (e.g. after the app refreshed it).
    public func setAccessToken(_ token: String?) { accessToken = token }

    // MARK: - Reads

    /// The canonical JSON bytes of record `id` as the app sees it (pending writes
    /// included), or nil.
    public func recordBytes(id: String) throws -> [UInt8]? { try storage.record(id: id) }

    /// Record `id` parsed, or nil.
    public func record(id: String) throws -> JSONValue? {
        try storage.record(id: id).map { try JSONReader(bytes: $0).readValue() }
    }

    /// Calls `body` with every visible record's canonical bytes (pending writes included),
    /// sorted by id.
    public func forEachRecord(_ body: (UnsafeRawBufferPointer) throws -> Void) throws { try storage.forEachRecord(body) }

    /// The records `query` selects, as the app sees them (pending writes included), in its
    /// order. See ``ReplicaQuery``.
    public func query(_ query: ReplicaQuery) throws -> [JSONValue] {
        var results: [JSONValue] = []
        try storage.query(query) { results.append(try JSONReader(bytes: Array($0)).readValue()) }
        return results
    }

    /// Indexes `field` (a dotted path, e.g. `owner.email`) so queries filtering or ordering on
    /// it take milliseconds on a million records. Idempotent; indexes live in the replica file.
    public func createIndex(on field: String) throws { try storage.createIndex(on: field) }

    /// Visible records as the app sees them (pending writes included).
    public var count: Int { (try? storage.localCount(serverCount: state.count)) ?? state.count }
    /// Visible records in the last verified server state.
    public var serverCount: Int { state.count }
    /// The body token of the state held (opaque).
    public var token: String? { state.token }
    /// Validators and sync bookkeeping, as stored.
    public var currentState: ReplicaState { state }
    public var lastSuccessfulSync: Date? { state.lastSuccessfulSync }
    public var lastError: String? { state.lastError }
    public var status: SyncStatus { status(at: Date()) }
    /// ``status`` as it is at `now`.
    public func status(at now: Date) -> SyncStatus {
        let status = SyncStatus.of(state, now: now)
        return postponedUpdate != nil && status == .synced ? .updatePostponed : status
    }

    /// Sets the data-plan policy for the syncs that follow (see ``NetworkBudget``): call it
    /// when the network changes.
    public func setNetworkBudget(_ budget: NetworkBudget) { networkBudget = budget }
    /// Body bytes received by the last ``sync()`` (0 for a 304). URLSession decodes gzip by
    /// itself on Linux and Apple platforms, so this is usually the decoded size.
    public private(set) var lastSyncBytesReceived = 0

    /// Recomputes count and checksum (and the state digest, once the replica holds signed
    /// data) of the server state held and compares them with the stored ones: true when it is
    /// exactly the state its token names (pending local writes live apart and do not count).
    public func verify() throws -> Bool {
        let recomputed = try storage.recomputed()
        guard recomputed.count == state.count && recomputed.checksum == state.checksum else { return false }
        guard let digest = state.digest else { return true }
        return try storage.recomputedDigest(collection: collection) == digest
    }

    /// Every sync outcome, as it happens (for refreshing a UI).
    public func outcomes() -> AsyncStream<SyncOutcome> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncOutcome.self)
        let id = UUID()
        continuations[id] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { await self?.removeContinuation(id) }
        }
        return stream
    }

    private func removeContinuation(_ id: UUID) { continuations[id] = nil }

    // MARK: - Sync

    /// Brings the replica up to date, following the fallback ladder:
    /// delta (or 304) → one full fetch without validators → keep the previous state.
    /// Honours backoff and the server's `Retry-After`/`Backoff`: called too early it returns
    /// `.deferred` at once, unless `ignoringBackoff` (a person explicitly asked to sync now).
    ///
    /// Pending local writes are pushed first (in order, in batches), so the server decides
    /// conflicts before the pull brings its state; see ``lastPushReport`` for what it
    /// accepted and refused. A sync called while another runs waits for that one.
    @discardableResult
    public func sync(now: Date = Date(), ignoringBackoff: Bool = false) async -> SyncOutcome {
        await run(now: now, waits: ignoringBackoff ? .none : .all, pushing: true)
    }

    /// Like ``sync(now:ignoringBackoff:)``, respecting exactly the waits `waits` names: a
    /// command a person runs again after a network error uses ``WaitPolicy/serverRequested``
    /// (retry now, but not before the server said).
    @discardableResult
    public func sync(now: Date = Date(), waits: WaitPolicy) async -> SyncOutcome {
        await run(now: now, waits: waits, pushing: true)
    }

    /// Like ``sync(now:ignoringBackoff:)`` without the push: queued writes stay queued (and
    /// visible), for a tool that only reads, or a moment with no right to write.
    @discardableResult
    public func pull(now: Date = Date(), ignoringBackoff: Bool = false) async -> SyncOutcome {
        await run(now: now, waits: ignoringBackoff ? .none : .all, pushing: false)
    }

    /// Like ``pull(now:ignoringBackoff:)``, respecting exactly the waits `waits` names.
    @discardableResult
    public func pull(now: Date = Date(), waits: WaitPolicy) async -> SyncOutcome {
        await run(now: now, waits: waits, pushing: false)
    }

    private func run(now: Date, waits: WaitPolicy, pushing: Bool) async -> SyncOutcome {
        // One sync at a time. A request the running one covers (it pushes if this one would,
        // and respects no more waits than this one) shares its outcome; a stronger one runs after.
        while let running = runningSync {
            let outcome = await running.task.value
            if (running.pushing || !pushing) && running.waits <= waits { return outcome }
        }
        let task = Task { await self.pushThenPull(now: now, waits: waits, pushing: pushing) }
        runningSync = (task, pushing, waits)
        let outcome = await task.value
        runningSync = nil
        for continuation in continuations.values { continuation.yield(outcome) }
        return outcome
    }

    /// Binds an unbound replica to this collection and server (see the initializer).
    func bindIfUnbound() {
        guard state.collection == nil || state.server == nil else { return }
        var next = state
        next.collection = collection
        next.server = url.absoluteString
        persist(next)
    }

    /// When the server's own wait (`Retry-After`, `Backoff`) ends, if it is still ahead of `now`.
    public func serverWait(at now: Date) -> Date? { waitingUntil(now, .serverRequested, ownBackoff: nil) }

    /// Records a wait the server asked for on a request made for this replica by someone
    /// else (``DeltaSnapReplicaSet``'s index request): kept like one of its own.
    func noteServerWait(until: Date) {
        guard state.serverNotBefore.map({ $0 < until }) ?? true else { return }
        var next = state
        next.serverNotBefore = until
        persist(next)
    }

    /// The time before which `waits` allows no request, if it is still ahead of `now`.
    /// `ownBackoff` is the replica's own backoff after failures (the pull's or the push's).
    func waitingUntil(_ now: Date, _ waits: WaitPolicy, ownBackoff: Date?) -> Date? {
        let until: Date? = switch waits {
        case .none: nil
        case .serverRequested: state.serverNotBefore
        case .all: [ownBackoff, state.serverNotBefore].compactMap { $0 }.max()
        }
        guard let until, now < until else { return nil }
        return until
    }

    private func pushThenPull(now: Date, waits: WaitPolicy, pushing: Bool) async -> SyncOutcome {
        lastSyncBytesReceived = 0
        lastAttachmentReport = AttachmentReport()
        if let until = waitingUntil(now, waits, ownBackoff: state.notBefore) {
            lastPushReport = PushReport()
            lastFailureKind = .unavailable
            return .deferred(until: until)
        }
        lastPushReport = pushing ? await pushPending(now: now, waits: waits) : PushReport()
        // A push answer that asked for a wait (`Retry-After`, `Backoff`) holds the pull too.
        if let until = waitingUntil(now, waits == .none ? .none : .serverRequested, ownBackoff: nil) {
            lastFailureKind = .unavailable
            return .deferred(until: until)
        }
        // Writes accepted so far are in the state the pull will bring: they leave the queue
        // in the pull's own transaction (never before, so they never flicker out of view).
        let settled = try? storage.lastAcknowledgedSeq()
        let outcome = await performSync(now: now, droppingAcknowledgedThrough: settled)
        await settleAttachments(after: outcome)
        return outcome
    }

    /// `Accept-Encoding: gzip` and the bearer token, which every request of a sync carries.
    func requestHeaders() -> [String: String] {
        SyncRequest.headers(accessToken: accessToken)
    }

    /// A `GET` of a body (a delta, a full body), within the ``networkBudget``.
    func fetchBody(_ url: URL, headers: [String: String]) async throws -> SyncResponse {
        try await transport.fetch(SyncRequest(url: url, headers: headers, timeout: timeout, maximumBodyBytes: networkBudget.maximumBodyBytes))
    }

    /// The outcome of a sync whose body was over the budget: nothing changes but the note
    /// of the waiting update (no failure: no backoff, and the data stays current as of the
    /// last sync).
    func postpone(_ over: SyncBodyOverBudget) -> SyncOutcome {
        lastFailureKind = nil
        postponedUpdate = over
        return .postponed(bytes: over.announcedBytes, budget: over.limit)
    }

    private func performSync(now: Date, droppingAcknowledgedThrough settled: UInt64?) async -> SyncOutcome {
        if !trustedKeys.isEmpty { return await signedSync(now: now, droppingAcknowledgedThrough: settled) }
        var headers = requestHeaders()
        if state.hasData {
            if let etag = state.etag { headers["If-None-Match"] = etag }
            if let lastModified = state.lastModified { headers["If-Modified-Since"] = lastModified }
        }
        let first: SyncResponse
        do {
            first = try await fetchBody(url, headers: headers)
        } catch let over as SyncBodyOverBudget {
            return postpone(over)
        } catch {
            return recordFailure("request failed: \(Self.describe(error))", retryable: true, serverAsked: nil, now: now, unavailable: true)
        }
        defer { first.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
        return await answer(first, step: .conditional, reason: nil, now: now, droppingAcknowledgedThrough: settled)
    }

    /// Follows ``FallbackLadder`` from the answer `response` to the request of `step`.
    /// `reason`: why the full fetch was made.
    private func answer(
        _ response: SyncResponse, step: FallbackLadder.Step, reason: String?, now: Date, droppingAcknowledgedThrough settled: UInt64?
    ) async -> SyncOutcome {
        let serverAsked = RetryPolicy.serverDelay(retryAfter: response.header("Retry-After"), backoff: response.header("Backoff"), now: now)
        switch FallbackLadder.decide(step, status: response.status) {
        case .notModified:
            return recordSuccess(
                .notModified, etag: response.header("ETag"), lastModified: response.header("Last-Modified"), serverAsked: serverAsked, now: now,
                droppingAcknowledgedThrough: settled)
        case .apply:
            do {
                let result = try apply(response, expectFull: step == .full, droppingAcknowledgedThrough: settled)
                let outcome: SyncOutcome = reason.map { .reset(result, reason: $0) } ?? .applied(result)
                return recordSuccess(outcome, etag: nil, lastModified: nil, serverAsked: serverAsked, now: now)
            } catch {
                switch FallbackLadder.afterUnusableBody(step) {
                case .fullFetch:
                    return await resetWithFullFetch(reason: Self.describe(error), now: now, droppingAcknowledgedThrough: settled)
                case .keep:
                    return recordFailure(
                        "\(reason.map { "\($0); " } ?? "")full body unusable: \(Self.describe(error))", retryable: true, serverAsked: serverAsked, now: now)
                }
            }
        case .keep(let retryable, let unavailable, let why):
            // What the server said (`503 over_capacity: … retry after 1 s`), not the bare status.
            let said = ServerErrorBody(Self.readBody(response, atMost: 64 << 10)).map { " (\($0))" } ?? ""
            return recordFailure(
                "\(reason.map { "\($0); " } ?? "")\(why)\(said)", retryable: retryable, serverAsked: serverAsked, now: now, unavailable: unavailable)
        }
    }

    private func resetWithFullFetch(reason: String, now: Date, droppingAcknowledgedThrough settled: UInt64?) async -> SyncOutcome {
        let response: SyncResponse
        do {
            response = try await fetchBody(url, headers: requestHeaders())
        } catch let over as SyncBodyOverBudget {
            return postpone(over)
        } catch {
            return recordFailure("\(reason); full fetch failed: \(Self.describe(error))", retryable: true, serverAsked: nil, now: now, unavailable: true)
        }
        defer { response.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
        return await answer(response, step: .full, reason: reason, now: now, droppingAcknowledgedThrough: settled)
    }

    func apply(
        _ response: SyncResponse, expectFull: Bool = false, droppingAcknowledgedThrough settled: UInt64?, expected: SignedIndex.Entry? = nil
    ) throws -> ApplyResult {
        guard let file = response.bodyFile else { throw ApplyError.decode("the 200 response has no body") }
        lastSyncBytesReceived += (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? 0
        // URLSession may or may not have decoded gzip already: look at the bytes, not the header.
        let source = try Self.isGzip(file) ? ChunkSources.gunzip(try ChunkSources.file(at: file.path)) : try ChunkSources.file(at: file.path)
        var state = self.state
        if expectFull { state.token = nil }  // a delta in answer to a validator-less request cannot apply
        let (result, newState) = try BodyApplier(storage: storage, collection: collection)
            .apply(
                BodyReader(nextChunk: source), state: state, etag: response.header("ETag"), lastModified: response.header("Last-Modified"),
                droppingAcknowledgedThrough: settled, expected: expected)
        self.state = newState
        return result
    }

    static func isGzip(_ file: URL) throws -> Bool {
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        let magic = try handle.read(upToCount: 2) ?? Data()
        return magic == Data([0x1F, 0x8B])
    }

    // MARK: - Bookkeeping

    func recordSuccess(
        _ outcome: SyncOutcome, etag: String?, lastModified: String?, serverAsked: Double?, now: Date, droppingAcknowledgedThrough settled: UInt64? = nil
    ) -> SyncOutcome {
        lastFailureKind = nil
        postponedUpdate = nil
        var next = state
        // Bound at the first successful sync (a mistyped URL that failed binds nothing).
        next.collection = collection
        next.server = url.absoluteString
        next.serverNotBefore = serverAsked.map { now.addingTimeInterval($0) }
        // A 304 may carry fresh validators; store them exactly as received.
        if let etag { next.etag = etag }
        if let lastModified { next.lastModified = lastModified }
        next.lastSuccessfulSync = now
        next.lastError = nil
        next.failingSince = nil
        next.consecutiveFailures = 0
        next.notBefore = serverAsked.map { now.addingTimeInterval($0) }
        persist(next, droppingAcknowledgedThrough: settled)
        return outcome
    }

    /// Records a failed sync. `unavailable`: the server could not be reached or asked to be
    /// left alone (no answer, `408`, `429`, `5xx`): trying later is all a caller can do.
    func recordFailure(_ reason: String, retryable: Bool, serverAsked: Double?, now: Date, unavailable: Bool = false) -> SyncOutcome {
        lastFailureKind = unavailable ? .unavailable : .rejected
        var next = state
        next.serverNotBefore = serverAsked.map { now.addingTimeInterval($0) } ?? next.serverNotBefore
        next.lastError = reason
        next.failingSince = next.failingSince ?? now
        next.consecutiveFailures += 1
        let delay = retryable
            ? retryPolicy.delay(afterFailures: next.consecutiveFailures, serverAsked: serverAsked, random: Double.random(in: 0..<1))
            : serverAsked
        next.notBefore = delay.map { now.addingTimeInterval($0) }
        persist(next)
        return .failed(reason: reason, retryAfter: retryable ? next.notBefore : nil)
    }

    /// Stores `next` as the replica's state (with the queue settled after a pull, when given).
    func persist(_ next: ReplicaState, droppingAcknowledgedThrough settled: UInt64? = nil) {
        // Bookkeeping only: if it cannot be written the data is still intact, so keep going.
        if let settled {
            try? storage.writeTransaction {
                // A 304 after a push: the state held already has the accepted writes.
                try storage.settleAfterPull(droppingAcknowledgedThrough: settled)
                try storage.save(next)
            }
        } else {
            // No data changes: a bundled replica read in place stays in place.
            try? storage.saveBookkeeping(next)
        }
        state = next
    }

    package static func describe(_ error: any Error) -> String {
        // URLSession's errors print as nested NSError dumps; their own sentence is enough.
        let nsError = error as NSError
        if nsError.domain == NSURLErrorDomain {
            return (nsError.userInfo[NSLocalizedDescriptionKey] as? String) ?? "URL error \(nsError.code)"
        }
        return String(describing: error)
    }
}
