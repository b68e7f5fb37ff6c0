import DeltaSnapCore

/// What one write did.
package struct WriteResult: Sendable, Equatable {
    package var collection: String
    /// Whether a new version was committed (false when nothing changed).
    package var committed: Bool
    /// The collection's head after the write.
    package var head: CollectionHead?
    /// Records added or changed.
    package var upserted: Int
    /// Records hidden.
    package var hidden: Int
    /// Records given that were already in that state.
    package var unchanged: Int

    package var token: ServerToken? { head?.token }

    package init(collection: String, committed: Bool, head: CollectionHead?, upserted: Int, hidden: Int, unchanged: Int) {
        self.collection = collection
        self.committed = committed
        self.head = head
        self.upserted = upserted
        self.hidden = hidden
        self.unchanged = unchanged
    }
}
