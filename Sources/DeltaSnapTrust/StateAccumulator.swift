import DeltaSnapCore

/// The one write rule for a collection's state, wherever records are written — the SQLite
/// store's writer, PostgreSQL's merge, a client applying a body: how one record changes the
/// visible count, the XXH64 checksum and (when maintained) the LtHash16 digest, and what it
/// counts as.
///
/// - A record equal to the stored one is no change.
/// - Hiding what is absent or already hidden is no change (no tombstone to send).
/// - Hiding a visible record takes its old value out; a visible record replaces the old
///   visible value, if any, and puts its own in.
///
/// ```swift
/// var state = StateAccumulator(collection: "countries", checksum: head.checksum, count: head.count, digest: nil)
/// let change = state.put(record, replacing: StoredValue(isHidden: false, hash: oldHash, bytes: oldBytes))
/// // state.checksum, state.count: the collection after the write
/// ```
package struct StateAccumulator: Sendable {
    package let collection: String
    package private(set) var checksum: StateChecksum
    /// Visible records.
    package private(set) var count: Int
    /// The LtHash16 digest, or nil when this writer does not maintain one.
    package private(set) var digest: StateDigest?
    /// Records added, changed or un-hidden.
    package private(set) var upserted = 0
    /// Records hidden.
    package private(set) var hidden = 0
    /// Records given that were already in that state.
    package private(set) var unchanged = 0

    /// What one record did to the state.
    package enum Change: Sendable, Equatable {
        case unchanged, upserted, hidden
    }

    /// The value a store or replica holds for an id before the write.
    package struct StoredValue {
        package var isHidden: Bool
        package var hash: UInt64
        /// The canonical bytes, when at hand: needed to take a value out of the digest and
        /// to tell an unchanged record; nil compares by nothing (the record counts as changed,
        /// which leaves checksum and count the same).
        package var bytes: UnsafeRawBufferPointer?

        package init(isHidden: Bool, hash: UInt64, bytes: UnsafeRawBufferPointer?) {
            self.isHidden = isHidden
            self.hash = hash
            self.bytes = bytes
        }
    }

    /// Starts from a collection's state (a new collection: `.empty`, 0, `.empty`/nil).
    package init(collection: String, checksum: StateChecksum, count: Int, digest: StateDigest?) {
        self.collection = collection
        self.checksum = checksum
        self.count = count
        self.digest = digest
    }

    /// Applies `record` over `old` (nil: the id was never held).
    @discardableResult
    package mutating func put(_ record: Record, replacing old: StoredValue?) -> Change {
        record.bytes.withUnsafeBytes { bytes in
            put(id: record.id, isHidden: record.isHidden, hash: record.isHidden ? 0 : record.hash, bytes: bytes, replacing: old)
        }
    }

    /// Applies a value given as parts (a row of a database) over `old`.
    @discardableResult
    package mutating func put(id: String, isHidden: Bool, hash: UInt64, bytes: UnsafeRawBufferPointer, replacing old: StoredValue?) -> Change {
        if let old, let oldBytes = old.bytes, oldBytes.elementsEqual(bytes) {
            unchanged += 1
            return .unchanged
        }
        if isHidden {
            guard let old, !old.isHidden else {
                unchanged += 1
                return .unchanged
            }
            takeOut(id: id, old)
            hidden += 1
            return .hidden
        }
        if let old, !old.isHidden { takeOut(id: id, old) }
        checksum.add(hash: hash)
        digest?.add(collection: collection, id: id, canonical: bytes)
        count += 1
        upserted += 1
        return .upserted
    }

    /// Adds a visible record the state is known not to hold (a full body being loaded):
    /// the rule's shortest branch, without looking for an old value.
    package mutating func insert(id: String, hash: UInt64, canonical: [UInt8]) {
        checksum.add(hash: hash)
        digest?.add(collection: collection, id: id, canonical: canonical)
        count += 1
        upserted += 1
    }

    /// Adds a digest computed elsewhere for records already counted here with
    /// `digest` maintained outside (PostgreSQL hashes large merges in parallel batches).
    package mutating func addDigest(_ other: StateDigest) {
        digest?.add(other)
    }

    private mutating func takeOut(id: String, _ old: StoredValue) {
        assert(digest == nil || old.bytes != nil, "a maintained digest needs the old value's bytes")
        checksum.remove(hash: old.hash)
        count -= 1
        if let bytes = old.bytes { digest?.remove(collection: collection, id: id, canonical: bytes) }
    }
}
