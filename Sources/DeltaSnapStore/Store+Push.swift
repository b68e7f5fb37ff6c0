import DeltaSnapCore
import DeltaSnapSQLite
import Foundation

/// How long a store keeps push results (for answering a retried batch the same way) and the
/// values writes replaced (for `history`).
///
/// ```swift
/// let outcome = try store.push(batch, from: "phone-1", to: "notes",
///                              retention: PushRetention(results: 7 * 86_400, history: 90 * 86_400))
/// ```
public struct PushRetention: Sendable, Equatable {
    /// Seconds a write's result is kept. Past it, a retry of that write is still never
    /// applied twice (the client's last `seq` is kept for good); it is answered `duplicate`.
    public var results: Int64
    /// Seconds a replaced value stays in a record's history.
    public var history: Int64

    public static let thirtyDays: Int64 = 30 * 86_400

    public init(results: Int64 = PushRetention.thirtyDays, history: Int64 = PushRetention.thirtyDays) {
        self.results = results
        self.history = history
    }
}

/// What ``Store/push(_:from:to:retention:)`` did.
public struct PushOutcome: Sendable, Equatable {
    /// The answer for the client, one result per write in the batch's order.
    public var response: PushResponse
    /// The collection's head after the batch (nil while it has no version).
    public var head: CollectionHead?

    public init(response: PushResponse, head: CollectionHead?) {
        self.response = response
        self.head = head
    }
}

/// A value a write replaced, kept so a user can recover what lost a conflict.
public struct HistoryEntry: Sendable, Equatable {
    /// The replaced record's canonical bytes.
    public var value: [UInt8]
    /// The version that had written this value.
    public var version: UInt64
    /// The version whose commit replaced it.
    public var replacedIn: UInt64
    /// Seconds since 1970 of that commit.
    public var replacedAt: Int64
    /// The client id whose push replaced it (never the user's name: history is as public
    /// as the collection).
    public var replacedBy: String

    public init(value: [UInt8], version: UInt64, replacedIn: UInt64, replacedAt: Int64, replacedBy: String) {
        self.value = value
        self.version = version
        self.replacedIn = replacedIn
        self.replacedAt = replacedAt
        self.replacedBy = replacedBy
    }
}

extension Store {
    /// Applies one client's batch of writes as at most one new version of `collection`.
    ///
    /// Writes are merged in the batch's order on top of the committed state (per field for a
    /// patch; an insert never replaces a visible record; deleting what is gone succeeds). A
    /// write whose `seq` the server already processed for this client is not applied again:
    /// it gets its stored result. Records' replaced values go to their history. Everything —
    /// records, results, the client's last `seq` — commits in one transaction.
    ///
    /// Write numbers are kept per (collection, `user`, `client`): one user cannot advance
    /// another's. An error reading the store throws (nothing is committed, the client
    /// retries); only the writes themselves are refused.
    public func push(
        _ mutations: [ParsedMutation], from client: String, user: String? = nil, to collection: String, retention: PushRetention = PushRetention(),
        merge policy: MergePolicy = .fields
    ) throws -> PushOutcome {
        try CollectionPath.validate(collection)
        return try db.transaction(.immediate) {
            // Retention runs on the real clock: a fixed SOURCE_DATE_EPOCH is for reproducible
            // bakes and must not make a server prune everything, or nothing.
            let now = Int64(Date().timeIntervalSince1970)
            let ledger = PushLedger(db: db, collection: collection, client: user.map { "\($0)/\(client)" } ?? client, displayName: client)
            let lastSeq = try ledger.lastSeq()
            let writer = try CollectionWriter(db: db, statements: statements, collection: collection, configuration: configuration)
            let fork = policy == .fork
                ? ForkCheck(client: client, epoch: writer.epoch, committedByThisClient: { try ledger.committed(version: $0) }) : nil
            let plan = try PushPlan(
                mutations, lastSeq: lastSeq, storedStatus: { try ledger.storedStatus(seq: $0) }, stored: { try writer.stored(id: $0) }, fork: fork)
            for (id, final) in plan.finalValues {
                try writer.put(final ?? Record.tombstone(id: id))
            }
            let written = try writer.commit()
            let results = plan.results(committedAs: written.head?.version ?? 0)
            if written.committed, let head = written.head {
                try ledger.recordHistory(plan.replacedValues, replacedIn: head.version, at: head.committedAt, keptAt: now)
            }
            try ledger.save(lastSeq: plan.newLastSeq, results: results.filter { $0.seq > lastSeq }, committed: written.committed, at: now)
            try ledger.prune(resultsBefore: now - retention.results, historyBefore: now - retention.history)
            let response = PushResponse(
                collection: collection, client: client, lastSeq: plan.newLastSeq, committed: written.committed,
                token: written.head?.token.description, results: results)
            return PushOutcome(response: response, head: written.head)
        }
    }

    /// The values writes replaced in record `id`, newest first.
    public func history(of id: String, in collection: String, limit: Int = 100) throws -> [HistoryEntry] {
        try read { _ in
            let statement = try db.prepare("""
                SELECT body, version, replaced_in, replaced_at, client FROM history
                WHERE collection = ? AND id = ? ORDER BY replaced_in DESC LIMIT ?
                """)
            try statement.bind(1, collection)
            try statement.bind(2, id)
            try statement.bind(3, limit)
            var entries: [HistoryEntry] = []
            while try statement.step() {
                entries.append(HistoryEntry(
                    value: statement.blob(0), version: statement.uint64(1), replacedIn: statement.uint64(2),
                    replacedAt: statement.int64(3), replacedBy: statement.string(4)))
            }
            return entries
        }
    }
}

/// What a push does, whichever store holds the collection: each write checked against the
/// client's ledger (a retried `seq` gets its stored answer), merged per field in order into
/// its record's value, or refused on its own. The store then writes ``finalValues`` as one
/// version and keeps ``replacedValues`` as history.
///
/// ```swift
/// let plan = try PushPlan(mutations, lastSeq: 3, storedStatus: { ledger[$0] }, stored: { records[$0] })
/// for (id, value) in plan.finalValues { try writer.put(value ?? .tombstone(id: id)) }
/// let results = plan.results(committedAs: head.version)
/// ```
public struct PushPlan {
    private var batch = BatchMerge()
    private var planned: [MutationResult] = []
    private var appliedIndexes: [Int] = []
    /// The client's last `seq` once this push is recorded.
    public let newLastSeq: UInt64

    /// `storedStatus(seq)`: the answer kept for an already-seen write; `stored(id)`: the
    /// record's committed value and the version that wrote it; `fork`: set when the
    /// collection merges by ``MergePolicy/fork``.
    public init(
        _ mutations: [ParsedMutation], lastSeq: UInt64,
        storedStatus: (UInt64) throws -> MutationResult.Status?, stored: (String) throws -> (record: Record, version: UInt64)?,
        fork: ForkCheck? = nil
    ) throws {
        newLastSeq = max(lastSeq, mutations.last?.seq ?? 0)
        planned.reserveCapacity(mutations.count)
        for parsed in mutations {
            if parsed.seq <= lastSeq {
                planned.append(MutationResult(seq: parsed.seq, status: try storedStatus(parsed.seq) ?? .duplicate))
                continue
            }
            guard let mutation = parsed.mutation else {
                planned.append(MutationResult(seq: parsed.seq, status: .refused(parsed.refusal ?? MutationRefusal(code: "invalid_mutation", message: "unreadable write"))))
                continue
            }
            if !batch.knows(mutation.id) { batch.remember(mutation.id, stored: try stored(mutation.id)) }
            if let fork, let copy = try fork.copy(of: mutation, original: batch.untouchedOriginal(mutation.id), current: batch.current(mutation.id)) {
                if !batch.knows(copy.id) { batch.remember(copy.id, stored: try stored(copy.id)) }
                batch.set(copy.id, to: copy)
                appliedIndexes.append(planned.count)
                planned.append(MutationResult(seq: parsed.seq, status: .copied(version: 0, copy: copy.id)))
                continue
            }
            do throws(MutationRefusal) {
                try batch.apply(mutation)
                appliedIndexes.append(planned.count)
                planned.append(MutationResult(seq: parsed.seq, status: .applied(version: 0)))
            } catch {
                planned.append(MutationResult(seq: parsed.seq, status: .refused(error)))
            }
        }
    }

    /// Each touched record's value after the batch (`nil`: absent), in first-touched order.
    public var finalValues: [(id: String, value: Record?)] { batch.finalValues() }

    /// Visible values the batch changed or removed, with the version that wrote them.
    public var replacedValues: [(record: Record, version: UInt64)] { batch.replacedValues() }

    /// Every write's answer, the applied (and copied) ones in version `version`.
    public func results(committedAs version: UInt64) -> [MutationResult] {
        var results = planned
        for index in appliedIndexes {
            if case .copied(_, let copy) = results[index].status {
                results[index].status = .copied(version: version, copy: copy)
            } else {
                results[index].status = .applied(version: version)
            }
        }
        return results
    }
}

/// How a collection merges a write whose record changed on the server since the device
/// saw it (the write's `base`).
public enum MergePolicy: String, Sendable, CaseIterable {
    /// Per field, last writer wins (the default): the write is merged over the newer value.
    case fields
    /// The write goes to a conflict copy next to the record (``ConflictCopy``); the
    /// original keeps the server's value.
    case fork
}

/// What ``PushPlan`` needs to decide a conflict copy in a collection merged by `fork`.
public struct ForkCheck {
    /// The pushing client's id (the copy's id derives from it and the write's `seq`).
    public let client: String
    /// The collection's epoch: a `base` of another epoch says nothing about what changed.
    public let epoch: String?
    /// Whether `version` was committed by this client's own push (its own earlier write is
    /// no conflict, even when its pull has not brought it yet).
    public let committedByThisClient: (UInt64) throws -> Bool

    public init(client: String, epoch: String?, committedByThisClient: @escaping (UInt64) throws -> Bool) {
        self.client = client
        self.epoch = epoch
        self.committedByThisClient = committedByThisClient
    }

    /// The copy to write instead of `mutation`, or nil to merge it as usual: only a put or
    /// patch with a `base` of this epoch, on a record the batch has not touched yet, whose
    /// committed version is newer than the base and not this client's own.
    func copy(of mutation: Mutation, original: (record: Record, version: UInt64)?, current: Record?) throws -> Record? {
        guard mutation.operation == .put || mutation.operation == .patch,
              let base = mutation.base.flatMap({ ServerToken($0) }), let epoch, base.epoch == epoch,
              let original, !original.record.isHidden, original.version > base.version,
              !(try committedByThisClient(original.version))
        else { return nil }
        let id = ConflictCopy.id(of: mutation.id, client: client, seq: mutation.seq)
        do { return try ConflictCopy.record(of: mutation, over: current, copyID: id) } catch { return nil }
    }
}

/// A batch's writes merged in memory before they reach the ``CollectionWriter``, which
/// takes each record once per version: three toggles of one record become its last state.
struct BatchMerge {
    private struct Entry {
        var original: (record: Record, version: UInt64)?
        var current: Record?
        var touched = false
    }

    private var entries: [String: Entry] = [:]
    /// Ids in the order first touched, so the write (and history) order is deterministic.
    private var order: [String] = []

    func knows(_ id: String) -> Bool { entries[id] != nil }

    /// Records `id`'s committed value (read by the caller, so a store error is never
    /// mistaken for a refusal of the write).
    mutating func remember(_ id: String, stored: (record: Record, version: UInt64)?) {
        entries[id] = Entry(original: stored, current: stored.flatMap { $0.record.isHidden ? nil : $0.record })
        order.append(id)
    }

    /// Merges `mutation` into its record's value; the record must be remembered first.
    mutating func apply(_ mutation: Mutation) throws(MutationRefusal) {
        guard var entry = entries[mutation.id] else { preconditionFailure("apply(_:) before remember(_:stored:)") }
        entry.current = try RecordMerge.apply(mutation, to: entry.current)
        entry.touched = true
        entries[mutation.id] = entry
    }

    /// Sets record `id` (remembered first) to `record`.
    mutating func set(_ id: String, to record: Record) {
        guard var entry = entries[id] else { preconditionFailure("set(_:to:) before remember(_:stored:)") }
        entry.current = record
        entry.touched = true
        entries[id] = entry
    }

    /// The record's current value in the batch.
    func current(_ id: String) -> Record? { entries[id]?.current }

    /// The committed value and version of `id` while no write of this batch has changed it.
    func untouchedOriginal(_ id: String) -> (record: Record, version: UInt64)? {
        guard let entry = entries[id], !entry.touched else { return nil }
        return entry.original
    }

    /// Each touched record's value after the batch (`nil`: absent).
    func finalValues() -> [(id: String, value: Record?)] {
        order.compactMap { id in entries[id].map { (id, $0.current) } }
    }

    /// Visible values the batch changed or removed, with the version that wrote them.
    func replacedValues() -> [(record: Record, version: UInt64)] {
        order.compactMap { id -> (record: Record, version: UInt64)? in
            guard let entry = entries[id], let original = entry.original, !original.record.isHidden else { return nil }
            return entry.current?.bytes == original.record.bytes ? nil : original
        }
    }
}

/// The push tables of one (collection, client): its last `seq`, its results, the history.
struct PushLedger {
    let db: SQLiteConnection
    let collection: String
    /// The ledger key: the user's name and the client id.
    let client: String
    /// What history shows as the writer: the client id alone.
    let displayName: String

    func lastSeq() throws -> UInt64 {
        let statement = try db.prepare("SELECT last_seq FROM push_clients WHERE collection = ? AND client = ?")
        try statement.bind(1, collection)
        try statement.bind(2, client)
        guard try statement.step() else { return 0 }
        defer { statement.reset() }
        return statement.uint64(0)
    }

    func storedStatus(seq: UInt64) throws -> MutationResult.Status? {
        let statement = try db.prepare("SELECT version, error, message FROM push_results WHERE collection = ? AND client = ? AND seq = ?")
        try statement.bind(1, collection)
        try statement.bind(2, client)
        try statement.bind(3, seq)
        guard try statement.step() else { return nil }
        defer { statement.reset() }
        return MutationResult.Status(
            keptVersion: statement.isNull(0) ? nil : statement.uint64(0), error: statement.isNull(1) ? nil : statement.string(1),
            message: statement.isNull(2) ? nil : statement.string(2))
    }

    /// Whether one of this client's pushes committed `version` (not merely named it: a batch
    /// that changed nothing names the head).
    func committed(version: UInt64) throws -> Bool {
        let statement = try db.prepare(
            "SELECT 1 FROM push_results WHERE collection = ? AND client = ? AND version = ? AND error IS NULL AND committed = 1 LIMIT 1")
        try statement.bind(1, collection)
        try statement.bind(2, client)
        try statement.bind(3, version)
        defer { statement.reset() }
        return try statement.step()
    }

    func save(lastSeq: UInt64, results: [MutationResult], committed: Bool, at now: Int64) throws {
        let client = try db.prepare("""
            INSERT INTO push_clients(collection, client, last_seq) VALUES (?, ?, ?)
            ON CONFLICT(collection, client) DO UPDATE SET last_seq = excluded.last_seq
            """)
        try client.bind(1, collection)
        try client.bind(2, self.client)
        try client.bind(3, lastSeq)
        try client.run()
        let insert = try db.prepare(
            "INSERT OR REPLACE INTO push_results(collection, client, seq, version, error, message, at, committed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        for result in results {
            guard let columns = result.status.keptColumns else { continue }
            try insert.bind(1, collection)
            try insert.bind(2, self.client)
            try insert.bind(3, result.seq)
            if let version = columns.version { try insert.bind(4, version) } else { try insert.bindNull(4) }
            if let error = columns.error { try insert.bind(5, error) } else { try insert.bindNull(5) }
            if let message = columns.message { try insert.bind(6, message) } else { try insert.bindNull(6) }
            try insert.bind(7, now)
            try insert.bind(8, committed)
            try insert.run()
        }
    }

    func recordHistory(_ replaced: [(record: Record, version: UInt64)], replacedIn version: UInt64, at time: Int64, keptAt now: Int64) throws {
        guard !replaced.isEmpty else { return }
        let insert = try db.prepare("INSERT OR REPLACE INTO history(collection, id, replaced_in, version, replaced_at, client, body, kept_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        for (record, recordVersion) in replaced {
            try insert.bind(1, collection)
            try insert.bind(2, record.id)
            try insert.bind(3, version)
            try insert.bind(4, recordVersion)
            try insert.bind(5, time)
            try insert.bind(6, displayName)
            try insert.bind(7, blob: record.bytes)
            try insert.bind(8, now)
            try insert.run()
        }
    }

    func prune(resultsBefore: Int64, historyBefore: Int64) throws {
        let results = try db.prepare("DELETE FROM push_results WHERE collection = ? AND at < ?")
        try results.bind(1, collection)
        try results.bind(2, resultsBefore)
        try results.run()
        let history = try db.prepare("DELETE FROM history WHERE collection = ? AND kept_at < ?")
        try history.bind(1, collection)
        try history.bind(2, historyBefore)
        try history.run()
    }
}

extension MutationResult.Status {
    /// A result as the push tables keep it (`version`, `error`, `message`), on either store.
    /// A copied write keeps its copy's id in `message` (an applied write has none), so the
    /// tables need no column of their own for it.
    public init(keptVersion version: UInt64?, error: String?, message: String?) {
        if let error {
            self = .refused(MutationRefusal(code: error, message: message ?? ""))
        } else if let message {
            self = .copied(version: version ?? 0, copy: message)
        } else {
            self = .applied(version: version ?? 0)
        }
    }

    /// The columns that keep this result; nil for a duplicate (nothing to keep).
    public var keptColumns: (version: UInt64?, error: String?, message: String?)? {
        switch self {
        case .applied(let version): (version, nil, nil)
        case .copied(let version, let copy): (version, nil, copy)
        case .refused(let refusal): (nil, refusal.code, refusal.message)
        case .duplicate: nil
        }
    }
}
