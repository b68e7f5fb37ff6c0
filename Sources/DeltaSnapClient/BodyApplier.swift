import DeltaSnapCore
import DeltaSnapSQLite
import DeltaSnapTrust
import Foundation

/// Why a body could not be applied; every case leads to a rollback.
package enum ApplyError: Error, Equatable, Sendable, CustomStringConvertible {
    case wrongCollection(expected: String, found: String)
    case wrongBase(held: String?, base: String)
    case body(BodyError)
    case decode(String)
    /// The body applied cleanly but the result is not what the signed index names.
    case trust(TrustError)

    package var description: String {
        switch self {
        case .wrongCollection(let expected, let found): "the body is for collection \"\(found)\", not \"\(expected)\""
        case .wrongBase(let held, let base): "the delta applies on \(base) but the replica holds \(held ?? "nothing")"
        case .body(let error): "\(error)"
        case .decode(let reason): reason
        case .trust(let error): "\(error)"
        }
    }
}

/// What an apply changed.
public struct ApplyResult: Sendable, Equatable {
    public var kind: BodyKind
    public var token: String
    /// Records written or removed.
    public var changed: Int
    /// Visible records after the apply.
    public var count: Int
    /// Ids that changed (for a delta; capped at ``changedIDLimit``); empty for a full body,
    /// after which everything may have changed.
    public var changedIDs: [String]

    public static let changedIDLimit = 10_000
}

/// Applies one full or delta body to the replica inside one transaction, maintaining and
/// then verifying the checksum; anything wrong rolls everything back.
struct BodyApplier {
    let storage: ReplicaStorage
    let collection: String

    /// Applies the body read by `reader`. `validators` are the response's `ETag` and
    /// `Last-Modified`, stored with the records in the same transaction, and so is the
    /// settling of local writes: accepted writes up to `droppingAcknowledgedThrough` leave
    /// the queue, and every pending write is replayed over the new server state.
    ///
    /// With `expected` (an entry of a verified signed index) the replica's ``StateDigest`` is
    /// maintained too, and the transaction commits only when token, count and digest equal
    /// the signed ones. A replica that has a digest (or `maintainDigest`) keeps maintaining it.
    func apply(
        _ reader: BodyReader, state: ReplicaState, etag: String?, lastModified: String?, droppingAcknowledgedThrough: UInt64? = nil,
        expected: SignedIndex.Entry? = nil, maintainDigest: Bool = false
    ) throws -> (ApplyResult, ReplicaState) {
        return try storage.writeTransaction {
            let db = storage.db
            let header: BodyHeader
            do { header = try reader.readHeader() } catch let error as BodyError { throw ApplyError.body(error) }
            guard header.collection == collection else { throw ApplyError.wrongCollection(expected: collection, found: header.collection) }
            var changed = 0
            var changedIDs: [String] = []
            let maintainsDigest = maintainDigest || expected != nil || state.digest != nil
            var accumulator: StateAccumulator
            switch header.kind {
            case .full:
                accumulator = StateAccumulator(collection: collection, checksum: .empty, count: 0, digest: maintainsDigest ? .empty : nil)
            case .delta:
                let digest = maintainsDigest ? try state.digest ?? storage.recomputedDigest(collection: collection) : nil
                accumulator = StateAccumulator(collection: collection, checksum: state.checksum, count: state.count, digest: digest)
            }
            // The old body is read only when the digest needs it: unsigned replicas apply as before.
            let scope = storage.scope
            let lookup = try db.prepare("SELECT hash\(maintainsDigest ? ", body" : "") FROM records WHERE \(scope.condition()) AND id = ?")
            let upsert = try db.prepare("""
                INSERT INTO records(collection, id, hash, body) VALUES (\(scope.literal), ?, ?, ?)
                ON CONFLICT(\(scope.key("id"))) DO UPDATE SET hash = excluded.hash, body = excluded.body
                """)
            let delete = try db.prepare("DELETE FROM records WHERE \(scope.condition()) AND id = ?")
            // The record's file references change with it, in this transaction (a record
            // of a full body has none to replace: they were all forgotten first).
            func write(_ record: Record, hash: UInt64, replacing: Bool) throws {
                try upsert.bind(1, record.id)
                try upsert.bind(2, hash)
                try upsert.bind(3, blob: record.bytes)
                try upsert.run()
                if replacing {
                    try storage.indexReferences(.record, id: record.id, bytes: record.bytes)
                } else {
                    try storage.addReferences(.record, id: record.id, bytes: record.bytes)
                }
            }

            switch header.kind {
            case .full:
                // A full body replaces: records absent from it are gone.
                storage.noteEverythingChanged()
                try db.execute("DELETE FROM records WHERE \(scope.condition())")
                try storage.unindexAllReferences(.record)
                var previousID: String?
                try readRecords(reader) { record in
                    guard !record.isHidden else { throw ApplyError.body(.tombstoneInFullBody(id: record.id)) }
                    if let previousID, !previousID.utf8Precedes(record.id) { throw ApplyError.body(.duplicateRecord(id: record.id)) }
                    previousID = record.id
                    let hash = record.hash
                    accumulator.insert(id: record.id, hash: hash, canonical: record.bytes)
                    try write(record, hash: hash, replacing: false)
                    changed += 1
                }
            case .delta:
                guard header.base == state.token else { throw ApplyError.wrongBase(held: state.token, base: header.base ?? "") }
                try readRecords(reader) { record in
                    // A replica holds visible records only: a hidden one is a deleted row.
                    let hash = record.isHidden ? 0 : record.hash
                    try lookup.bind(1, record.id)
                    let found = try lookup.step()
                    let change = record.bytes.withUnsafeBytes { bytes in
                        guard found else { return accumulator.put(id: record.id, isHidden: record.isHidden, hash: hash, bytes: bytes, replacing: nil) }
                        let stored = lookup.uint64(0)
                        let replacing = { (old: UnsafeRawBufferPointer?) in
                            accumulator.put(
                                id: record.id, isHidden: record.isHidden, hash: hash, bytes: bytes,
                                replacing: StateAccumulator.StoredValue(isHidden: false, hash: stored, bytes: old))
                        }
                        return maintainsDigest ? lookup.withBlob(1) { replacing($0) } : replacing(nil)
                    }
                    if found { lookup.reset() }
                    switch change {
                    case .unchanged: break
                    case .hidden:
                        try delete.bind(1, record.id)
                        try delete.run()
                        try storage.unindexReferences(.record, id: record.id)
                    case .upserted:
                        try write(record, hash: hash, replacing: true)
                    }
                    changed += 1
                    storage.noteChanged(record.id)
                    if changedIDs.count < ApplyResult.changedIDLimit { changedIDs.append(record.id) }
                }
            }
            let (checksum, count, digest) = (accumulator.checksum, accumulator.count, accumulator.digest)
            guard reader.recordsRead == header.count else { throw ApplyError.body(.countMismatch(announced: header.count, found: reader.recordsRead)) }
            guard checksum == header.checksum else { throw ApplyError.body(.checksumMismatch(expected: header.checksum, computed: checksum)) }
            if let expected {
                let reason: String? =
                    header.token != expected.token ? "the body leads to \(header.token), the index names \(expected.token)"
                    : count != expected.count ? "\(count) records, the index names \(expected.count)"
                    : digest?.fingerprint != expected.digest ? "the state digest differs from the signed one"
                    : nil
                if let reason { throw ApplyError.trust(.stateMismatch(collection: collection, reason: reason)) }
            }
            var newState = state
            newState.digest = digest
            newState.token = header.token
            newState.checksum = checksum
            newState.count = count
            newState.etag = etag ?? "\"\(header.token)\""
            newState.lastModified = lastModified ?? header.lastModified
            try storage.settleAfterPull(droppingAcknowledgedThrough: droppingAcknowledgedThrough)
            try storage.save(newState)
            return (ApplyResult(kind: header.kind, token: header.token, changed: changed, count: count, changedIDs: changedIDs), newState)
        }
    }

    private func readRecords(_ reader: BodyReader, _ body: (Record) throws -> Void) throws {
        while true {
            let record: Record?
            do { record = try reader.nextRecord() } catch let error as BodyError { throw ApplyError.body(error) }
            guard let record else { return }
            try body(record)
        }
    }
}
