import DeltaSnapCore
import Foundation

/// A local write waiting for the server: queued (not yet accepted), or accepted and waiting
/// for the pull that brings the server's value (it stays visible until then).
public struct PendingWrite: Sendable, Equatable {
    /// The write's number, the write id the server deduplicates on (with the client id).
    public var seq: UInt64
    public var operation: Mutation.Operation
    /// The record's id.
    public var id: String
    /// The record (put, insert) or the fields (patch); nil for delete.
    public var value: JSONValue?
    /// When the write was made, by this device's clock (informative only: the server's
    /// commit order decides conflicts).
    public var createdAt: Date
    /// The server accepted it; the next successful pull drops it from the overlay.
    public var isAcknowledged: Bool
    /// The token of the state this replica held when the write was made (sent as the
    /// write's `base`: a collection merged by `fork` copies it if its record changed since).
    public var base: String?

    /// The write as it is pushed.
    public var mutation: Mutation { Mutation(seq: seq, operation: operation, id: id, value: value, base: base) }
}

/// A write the server committed as a conflict copy (its collection merges by `fork` and the
/// record had changed since the write's base): the original keeps the server's value, and
/// the write's result is the new record `copy` (with `"conflictOf"` naming the original),
/// which the pull brings. Show the user both.
public struct CopiedWrite: Sendable, Equatable {
    public var seq: UInt64
    public var operation: Mutation.Operation
    /// The record the write was made to.
    public var id: String
    /// The conflict copy's id.
    public var copy: String
}

/// A write the server refused: rolled back locally, reported to the app.
public struct RefusedWrite: Sendable, Equatable {
    public var seq: UInt64
    public var operation: Mutation.Operation
    public var id: String
    /// Why, in the server's words (`code` is stable, `message` is for a person).
    public var refusal: MutationRefusal
}

/// What the push step of one ``DeltaSnapReplica/sync()`` did.
public struct PushReport: Sendable, Equatable {
    /// Writes the server accepted (a delete of what was already gone counts).
    public var accepted: Int = 0
    /// Writes the server refused, now rolled back.
    public var refused: [RefusedWrite] = []
    /// Accepted writes the server committed as conflict copies (counted in ``accepted`` too).
    public var copied: [CopiedWrite] = []
    /// Requests made.
    public var batches: Int = 0
    /// Why pushing stopped early (the writes stay queued and are retried), or nil.
    public var failure: String?
    /// With ``failure``: whether the server was out of reach or asked to wait (try later),
    /// or refused the request.
    public var failureKind: SyncFailureKind?
    /// Writes still waiting to be pushed after this step.
    public var stillQueued: Int = 0

    public init() {}
}

/// The status dot an app shows next to its data.
///
/// ```swift
/// switch await replica.indicator {
/// case .green: dot.color = .systemGreen      // synced, nothing pending
/// case .amber: dot.color = .systemOrange     // writes pending (or not synced yet)
/// case .red:   dot.color = .systemRed        // syncing has failed for over an hour
/// }
/// ```
public enum SyncIndicator: String, Sendable, Equatable {
    case green, amber, red
}
