/// Folds a new local write into the queued write before it on the same record, so a user who
/// toggles a field five times offline sends one write, not five.
///
/// Only a write that has never left the device may be folded into (one already sent keeps
/// its bytes: the server may have processed it under its `seq`, and a retry must be the same
/// write). The rule keeps what the server would make of the two writes in a row:
///
/// | earlier | later | queued instead |
/// |---|---|---|
/// | patch | patch | one patch: the later fields over the earlier (a `null` stays, it removes) |
/// | put | patch | the put with the patch merged into its value |
/// | insert | patch | the insert with the patch merged in — while the server holds no such record |
/// | put / patch | put | the later put |
/// | put / patch / delete | delete | the delete |
/// | insert | delete | nothing, while the server holds no such record (it was never pushed); else the delete |
///
/// Every other pair stays two writes: an insert followed by a put (the insert's create-only
/// refusal must stay possible, and the put then lands), a delete followed by a put or an
/// insert. "The server holds" is what the replica last pulled: once a pull brought someone
/// else's record under the same id, the insert will be refused, and a patch or delete the
/// user made after it must still reach that record.
///
/// ```swift
/// let on = Mutation(seq: 4, operation: .patch, id: "post-1", value: .object([JSONMember("recommended", .bool(true))]))
/// let off = Mutation(seq: 5, operation: .patch, id: "post-1", value: .object([JSONMember("recommended", .bool(false))]))
/// WriteCoalescing.fold(off, into: on, serverHasRecord: true)   // .write(patch {"recommended":false}, seq 4)
/// ```
package enum WriteCoalescing {
    /// What replaces the earlier queued write.
    package enum Folded: Sendable, Equatable {
        /// One write, under the earlier write's `seq`.
        case write(Mutation)
        /// Nothing is left to send: the earlier write leaves the queue.
        case nothing
    }

    /// `later` folded into `earlier` (both on one record, `earlier` never sent), or nil when
    /// the two must stay separate writes. `serverHasRecord`: the server state the replica
    /// holds has a visible record with this id.
    package static func fold(_ later: Mutation, into earlier: Mutation, serverHasRecord: Bool) -> Folded? {
        guard later.id == earlier.id else { return nil }
        func replaced(_ operation: Mutation.Operation, _ value: JSONValue?) -> Folded {
            // The earlier base: the folded write started from what the device showed then.
            .write(Mutation(seq: earlier.seq, operation: operation, id: earlier.id, value: value, base: earlier.base))
        }
        switch (earlier.operation, later.operation) {
        case (.patch, .patch):
            guard let fields = merged(later.value, over: earlier.value, keepingNulls: true) else { return nil }
            return replaced(.patch, fields)
        case (.put, .patch):
            guard let value = merged(later.value, over: earlier.value, keepingNulls: false) else { return nil }
            return replaced(.put, value)
        case (.insert, .patch):
            // Someone else's record under this id will refuse the insert: the patch must stay apart.
            guard !serverHasRecord, let value = merged(later.value, over: earlier.value, keepingNulls: false) else { return nil }
            return replaced(.insert, value)
        case (.put, .put), (.patch, .put):
            return replaced(.put, later.value)
        case (.put, .delete), (.patch, .delete), (.delete, .delete):
            return replaced(.delete, nil)
        case (.insert, .delete):
            return serverHasRecord ? replaced(.delete, nil) : .nothing
        default:
            return nil
        }
    }

    /// The members of `top` set over those of `base` (both objects) by the merge rule of a
    /// patch, in canonical order.
    private static func merged(_ top: JSONValue?, over base: JSONValue?, keepingNulls: Bool) -> JSONValue? {
        guard case .object(let fields)? = top, case .object(let members)? = base else { return nil }
        return .object(RecordMerge.merge(fields, into: members, keepingNulls: keepingNulls).sorted { $0.key.utf8Precedes($1.key) })
    }
}
