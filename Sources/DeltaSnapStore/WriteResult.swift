import DeltaSnapCore

/// What one write did.
public struct WriteResult: Sendable, Equatable {
    public var collection: String
    /// Whether a new version was committed (false when nothing changed).
    public var committed: Bool
    /// The collection's head after the write.
    public var head: CollectionHead?
    /// Records added or changed.
    public var upserted: Int
    /// Records hidden.
    public var hidden: Int
    /// Records given that were already in that state.
    public var unchanged: Int

    public var token: ServerToken? { head?.token }

    public init(collection: String, committed: Bool, head: CollectionHead?, upserted: Int, hidden: Int, unchanged: Int) {
        self.collection = collection
        self.committed = committed
        self.head = head
        self.upserted = upserted
        self.hidden = hidden
        self.unchanged = unchanged
    }
}
