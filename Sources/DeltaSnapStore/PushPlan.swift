import DeltaSnapCore

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

/// What ``SQLiteDatabase/push(_:from:to:retention:)`` did.
package struct PushOutcome: Sendable, Equatable {
    /// The answer for the client, one result per write in the batch's order.
    package var response: PushResponse
    /// The collection's head after the batch (nil while it has no version).
    package var head: CollectionHead?

    package init(response: PushResponse, head: CollectionHead?) {
        self.response = response
        self.head = head
    }
}

/// A value a write replaced, kept so a user can recover what lost a conflict.
package struct HistoryEntry: Sendable, Equatable {
    /// The replaced record's canonical bytes.
    package var value: [UInt8]
    /// The version that had written this value.
    package var version: UInt64
    /// The version whose commit replaced it.
    package var replacedIn: UInt64
    /// Seconds since 1970 of that commit.
    package var replacedAt: Int64
    /// The client id whose push replaced it (never the user's name: history is as public
    /// as the collection).
    package var replacedBy: String

    package init(value: [UInt8], version: UInt64, replacedIn: UInt64, replacedAt: Int64, replacedBy: String) {
        self.value = value
        self.version = version
        self.replacedIn = replacedIn
        self.replacedAt = replacedAt
        self.replacedBy = replacedBy
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
package struct PushPlan {
    private var batch = BatchMerge()
    private var planned: [MutationResult] = []
    private var appliedIndexes: [Int] = []
    /// The client's last `seq` once this push is recorded.
    package let newLastSeq: UInt64

    /// The key every store keeps a client's push ledger (last `seq`, results) under: write
    /// numbers are per (user, client), so one user can never advance another's. A client
    /// without a user (the admin token, an open collection) is keyed by its id alone.
    package static func ledgerKey(client: String, user: String?) -> String {
        user.map { "\($0)/\(client)" } ?? client
    }

    /// `storedStatus(seq)`: the answer kept for an already-seen write; `stored(id)`: the
    /// record's committed value and the version that wrote it; `fork`: set when the
    /// collection merges by ``MergePolicy/fork``; `attachmentSize(sha256)`: the size of a blob
    /// the store holds (nil: not held), so a write whose value refers to a missing blob is
    /// refused alone (``AttachmentRule``).
    package init(
        _ mutations: [ParsedMutation], lastSeq: UInt64,
        storedStatus: (UInt64) throws -> MutationResult.Status?, stored: (String) throws -> (record: Record, version: UInt64)?,
        fork: ForkCheck? = nil, attachmentSize: (String) throws -> UInt64? = { _ in nil }
    ) throws {
        // A store failure while looking a blob up is no refusal of the write: it throws.
        func checkAttachments(_ value: Record?) throws -> MutationRefusal? {
            guard let value else { return nil }
            do {
                try AttachmentRule.checkAll(value, heldSize: attachmentSize)
                return nil
            } catch let error as StoreError where error.code == .missingAttachment || error.code == .invalidAttachmentReference {
                return AttachmentRule.refusal(error)
            }
        }
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
                if let refusal = try checkAttachments(copy) {
                    planned.append(MutationResult(seq: parsed.seq, status: .refused(refusal)))
                    continue
                }
                if !batch.knows(copy.id) { batch.remember(copy.id, stored: try stored(copy.id)) }
                batch.set(copy.id, to: copy)
                appliedIndexes.append(planned.count)
                planned.append(MutationResult(seq: parsed.seq, status: .copied(version: 0, copy: copy.id)))
                continue
            }
            do {
                let merged = try batch.merged(mutation)
                if let refusal = try checkAttachments(merged) { throw refusal }
                batch.set(mutation.id, to: merged)
                appliedIndexes.append(planned.count)
                planned.append(MutationResult(seq: parsed.seq, status: .applied(version: 0)))
            } catch let refusal as MutationRefusal {
                planned.append(MutationResult(seq: parsed.seq, status: .refused(refusal)))
            }
        }
    }

    /// Each touched record's value after the batch (`nil`: absent), in first-touched order.
    package var finalValues: [(id: String, value: Record?)] { batch.finalValues() }

    /// Visible values the batch changed or removed, with the version that wrote them.
    package var replacedValues: [(record: Record, version: UInt64)] { batch.replacedValues() }

    /// Every write's answer, the applied (and copied) ones in version `version`.
    package func results(committedAs version: UInt64) -> [MutationResult] {
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
package enum MergePolicy: String, Sendable, CaseIterable {
    /// Per field, last writer wins (the default): the write is merged over the newer value.
    case fields
    /// The write goes to a conflict copy next to the record (``ConflictCopy``); the
    /// original keeps the server's value.
    case fork
}

/// What ``PushPlan`` needs to decide a conflict copy in a collection merged by `fork`.
package struct ForkCheck {
    /// The pushing client's id (the copy's id derives from it and the write's `seq`).
    package let client: String
    /// The collection's epoch: a `base` of another epoch says nothing about what changed.
    package let epoch: String?
    /// Whether `version` was committed by this client's own push (its own earlier write is
    /// no conflict, even when its pull has not brought it yet).
    package let committedByThisClient: (UInt64) throws -> Bool

    package init(client: String, epoch: String?, committedByThisClient: @escaping (UInt64) throws -> Bool) {
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

    /// `mutation` merged into its record's value (nil: deleted), not kept yet: ``set(_:to:)``
    /// keeps it once accepted. The record must be remembered first.
    func merged(_ mutation: Mutation) throws(MutationRefusal) -> Record? {
        guard let entry = entries[mutation.id] else { preconditionFailure("merged(_:) before remember(_:stored:)") }
        return try RecordMerge.apply(mutation, to: entry.current)
    }

    /// Sets record `id` (remembered first) to `record` (nil: absent).
    mutating func set(_ id: String, to record: Record?) {
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

extension MutationResult.Status {
    /// A result as the push tables keep it (`version`, `error`, `message`), on either store.
    /// A copied write keeps its copy's id in `message` (an applied write has none), so the
    /// tables need no column of their own for it.
    package init(keptVersion version: UInt64?, error: String?, message: String?) {
        if let error {
            self = .refused(MutationRefusal(code: error, message: message ?? ""))
        } else if let message {
            self = .copied(version: version ?? 0, copy: message)
        } else {
            self = .applied(version: version ?? 0)
        }
    }

    /// The columns that keep this result; nil for a duplicate (nothing to keep).
    package var keptColumns: (version: UInt64?, error: String?, message: String?)? {
        switch self {
        case .applied(let version): (version, nil, nil)
        case .copied(let version, let copy): (version, nil, copy)
        case .refused(let refusal): (nil, refusal.code, refusal.message)
        case .duplicate: nil
        }
    }
}
