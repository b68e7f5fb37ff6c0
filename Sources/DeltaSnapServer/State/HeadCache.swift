import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird
import NIOCore
import NIOConcurrencyHelpers

/// What the server keeps in memory per collection, so a `304` never touches SQLite.
/// Immutable, and a class: reading it out of the cache costs one reference, not a copy of
/// its dozen fields (a changed view compares a thousand heads).
final class ServedHead: Sendable {
    let head: CollectionHead
    /// `ETag`, `Last-Modified`, `Cache-Control` and `Vary`, ready to send.
    let validatorHeaders: HTTPFields
    /// The status line and ``validatorHeaders`` of a `304`, encoded once per version for
    /// ``RawPollHandler`` (which adds `Date`, maybe `X-Request-Id`, and the empty line).
    let encodedNotModifiedHead: ByteBuffer
    /// The `ETag` value, quoted: compared as a plain string on every poll.
    let etag: String
    /// Read into the cache on demand, not yet reported as a commit: see
    /// ``HeadCache/installReadOnDemand(_:)``.
    let readOnDemand: Bool

    init(head: CollectionHead, readOnDemand: Bool = false) {
        self.head = head
        self.readOnDemand = readOnDemand
        let validators = Self.validatorHeaders(for: head)
        validatorHeaders = validators
        etag = validators[.eTag]!
        encodedNotModifiedHead = validators.encodedHead(statusLine: "HTTP/1.1 304 Not Modified")
    }

    /// `ETag`, `Last-Modified`, `Cache-Control` and `Vary` of `head`: every answer about it
    /// carries them.
    static func validatorHeaders(for head: CollectionHead) -> HTTPFields {
        [
            .eTag: "\"\(head.token)\"",
            .lastModified: head.lastModified,
            .cacheControl: CacheRule.revalidate,
            .vary: "Accept-Encoding, If-None-Match, If-Modified-Since",
        ]
    }

    /// The common poll, checked before any parsing: the client sends back the current
    /// `ETag` exactly as it received it.
    func isCurrent(ifNoneMatch: String?) -> Bool {
        ifNoneMatch == etag
    }
}

/// The heads the server answers polls with: every collection's, and the partitions' in
/// use (a bounded cache: a store may hold millions, read one by one on demand). Installed
/// at once after the server's own commits and bodies, and changed whenever the store reports
/// another writer's commit (``DeltaSnapStore/StoreReader/watchForChanges(every:onChange:)``),
/// which names every change, so a cached head is never stale for longer than a watch.
final class HeadCache: Sendable {
    /// Everything the lock guards, as one plain value.
    private struct State: Sendable {
        var collections: [String: ServedHead] = [:]
        /// The partitions in use; past the capacity, CLOCK forgets one not read lately (it is
        /// read again on demand).
        var partitions: BoundedCache<String, ServedHead>
        /// Counts the heads installed by commits (``update(_:)``, ``replace(with:)``); a head
        /// read into the cache on demand changes nothing.
        var changeCount: UInt64 = 0
        /// Which names each recent change installed: a view of a thousand heads compares only
        /// those (a changed view is answered within milliseconds, docs/BENCHMARKS.md).
        var changeLog: ChangeLog

        /// The head of `name`, marked as used.
        mutating func head(_ name: String) -> ServedHead? {
            CollectionPath.isPartition(name) ? partitions.value(forKey: name) : collections[name]
        }

        /// `names` changed, as one change.
        mutating func noteChange(of names: [String]) {
            guard !names.isEmpty else { return }
            changeCount &+= 1
            changeLog.record(names, as: changeCount)
        }

        /// `keepingFloor`: an equal version with a lower floor is older too (a report from a
        /// replica that has not seen a compaction). Whether the head held changed (a partition
        /// read on demand into the cache is no change).
        mutating func install(_ head: CollectionHead, keepingFloor: Bool, readOnDemand: Bool = false) -> Bool {
            let isPartition = CollectionPath.isPartition(head.name)
            let current = isPartition ? partitions.peek(head.name) : collections[head.name]
            var confirming = false
            if let current, current.head.epoch == head.epoch,
               current.head.version > head.version || (current.head.version == head.version && (!keepingFloor || current.head.floor >= head.floor)) {
                // The report of a commit whose head was read on demand first is the change.
                guard current.readOnDemand, !readOnDemand, current.head.token == head.token, current.head.floor == head.floor else { return false }
                confirming = true
            }
            let served = ServedHead(head: head, readOnDemand: readOnDemand)
            let changed = confirming || (current.map { $0.head.token != head.token || $0.head.floor != head.floor } ?? true)
            if isPartition {
                partitions.set(served, forKey: head.name)
            } else {
                collections[head.name] = served
            }
            return changed
        }
    }

    private let state: NIOLockedValueBox<State>
    /// Partitions kept at most (read again on demand once forgotten).
    let partitionCapacity: Int
    /// Called after every change, outside the lock (the server wakes its held requests).
    private let onChange: (@Sendable () -> Void)?

    init(
        _ initial: [CollectionHead], partitionCapacity: Int = 100_000, changeLogCapacity: Int = 16_384, onChange: (@Sendable () -> Void)? = nil
    ) {
        self.partitionCapacity = max(1, partitionCapacity)
        self.onChange = onChange
        state = NIOLockedValueBox(State(partitions: BoundedCache(capacity: max(1, partitionCapacity)), changeLog: ChangeLog(capacity: changeLogCapacity)))
        replace(with: initial)
    }

    /// The head of `name` held in memory: every collection's, a partition's when cached.
    subscript(name: String) -> ServedHead? {
        state.withLockedValue { $0.head(name) }
    }

    /// The head of `name`: from memory, else read from `store` (a partition not in use
    /// lately, a collection another instance created that the watcher has not reported yet).
    func served(_ name: String, store: any StoreReader) async throws -> ServedHead? {
        if let served = self[name] { return served }
        guard let head = try await store.head(of: name) else { return nil }
        // No wake: reading a head into the cache changes no view (a newer commit than the
        // one a waiter saw is reported by the watcher or installed by ``update(_:)``).
        installReadOnDemand(head)
        return self[name] ?? ServedHead(head: head)
    }

    /// Installs a head read from the store on demand (a partition not in use lately): no
    /// change, so nobody is woken. It may be newer than the head a view built before its
    /// eviction holds, while the commit that made it is not reported yet; that report then
    /// counts as the change (``State/install(_:keepingFloor:readOnDemand:)``), so views that
    /// depend on it see it moved.
    func installReadOnDemand(_ head: CollectionHead) {
        state.withLockedValue { _ = $0.install(head, keepingFloor: false, readOnDemand: true) }
    }

    /// The heads of `names` (nil: does not exist): from memory, and those it lacks read from
    /// `store` in one read: a first view of a thousand partitions not in use lately is one
    /// query on PostgreSQL, not a thousand round trips one after the other.
    func heads(of names: [String], store: any StoreReader) async throws -> [String: CollectionHead] {
        var found: [String: CollectionHead] = [:]
        var missing: [String] = []
        state.withLockedValue { state in
            for name in names {
                if let served = state.head(name) { found[name] = served.head } else { missing.append(name) }
            }
        }
        guard !missing.isEmpty else { return found }
        for head in try await store.heads(of: missing) {
            installReadOnDemand(head)
            found[head.name] = head
        }
        return found
    }

    /// ``served(_:store:)``'s head.
    func head(of name: String, store: any StoreReader) async throws -> CollectionHead? {
        try await served(name, store: store)?.head
    }

    /// Counts the heads installed by commits (``update(_:)``, ``replace(with:)``); a head
    /// read into the cache on demand changes nothing.
    var changes: UInt64 { state.withLockedValue { $0.changeCount } }

    /// How the heads `dependencies` names stand now: one comparison while no head changed
    /// since they last held; else a look at the heads changed since (or, when that is no
    /// longer known, at every one), under the lock.
    func standing(of dependencies: ViewDependencies) -> ViewStanding {
        state.withLockedValue { state in
            if dependencies.heldAt == state.changeCount { return .holds(at: state.changeCount) }
            guard state.collections.count == dependencies.collectionCount else { return .changed }
            let looked = state.changeLog.names(after: dependencies.heldAt).map { $0.compactMap(dependencies.position(of:)) }
                ?? Array(dependencies.heads.indices)
            var moved: [Int: CollectionHead] = [:]
            for position in looked {
                let (name, token, floor) = dependencies.heads[position]
                let held = state.head(name)?.head
                if held?.token == token, (held?.floor ?? 0) == floor { continue }
                // Created, or forgotten by the bounded cache: only a new read can tell.
                guard token != nil, let held else { return .changed }
                moved[position] = held
            }
            return moved.isEmpty ? .holds(at: state.changeCount) : .moved(moved, at: state.changeCount)
        }
    }

    /// Every collection's head (no partition), sorted by name.
    var all: [ServedHead] {
        state.withLockedValue { $0.collections.values.sorted { $0.head.name.utf8Precedes($1.head.name) } }
    }

    /// Installs heads the store reported. A head never moves backwards within its epoch,
    /// and a collection the report lacks is kept (collections are never deleted): the read
    /// may come from a replica behind a head this server already answered.
    func replace(with fresh: [CollectionHead]) {
        let changed = state.withLockedValue { state in
            let changed = fresh.filter { state.install($0, keepingFloor: true) }.map(\.name)
            state.noteChange(of: changed)
            return !changed.isEmpty
        }
        if changed { onChange?() }
    }

    /// Installs a head the server just committed or read, without waiting for the watcher.
    func update(_ head: CollectionHead) {
        let changed = state.withLockedValue { state in
            let changed = state.install(head, keepingFloor: false)
            if changed { state.noteChange(of: [head.name]) }
            return changed
        }
        if changed { onChange?() }
    }
}
