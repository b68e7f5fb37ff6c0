import DeltaSnapCore

/// The one rule that keeps records and blobs consistent (docs/PROTOCOL.md §12): every
/// reference a written record makes is well formed and names a blob the store holds, with
/// the size it states. Both stores run it in their write transaction (import, the admin
/// API, push), and ``PushPlan`` runs it per write so a push refuses that write alone.
///
/// ```swift
/// for reference in try AttachmentRule.references(in: record) {
///     try AttachmentRule.check(reference, in: record, heldSize: blobs.size(of: reference.sha256))
/// }
/// ```
package enum AttachmentRule {
    /// The references `record` makes (none for a tombstone). Throws
    /// ``StoreError/invalidAttachmentReference(_:)`` for a value that carries the marker but is
    /// malformed: it must never be stored as plain data a client would read as a reference.
    package static func references(in record: Record) throws -> [AttachmentReference] {
        guard !record.isHidden, mayRefer(record.bytes) else { return [] }
        do {
            return try AttachmentReference.references(in: record)
        } catch let error as AttachmentReferenceError {
            throw StoreError.invalidAttachmentReference("record \"\(record.id)\": \(error)")
        } catch {
            throw StoreError.invalidAttachmentReference("record \"\(record.id)\": \(error)")
        }
    }

    /// Throws ``StoreError/missingAttachment(_:)`` unless the store holds `reference`'s blob
    /// (`heldSize`: its size, nil when not held) with the size the reference states.
    package static func check(_ reference: AttachmentReference, in record: Record, heldSize: UInt64?) throws {
        guard let heldSize else {
            throw StoreError.missingAttachment(
                "record \"\(record.id)\" refers to attachment \(reference.sha256), which the store does not hold; upload it before the record")
        }
        guard heldSize == reference.size else {
            throw StoreError.missingAttachment(
                "record \"\(record.id)\" states size \(reference.size) for attachment \(reference.sha256), which is \(heldSize) bytes")
        }
    }

    /// Checks every reference of `record` against `heldSize` (a blob's size, nil when not
    /// held) and returns them.
    @discardableResult
    package static func checkAll(_ record: Record, heldSize: (String) throws -> UInt64?) throws -> [AttachmentReference] {
        let references = try references(in: record)
        for reference in references { try check(reference, in: record, heldSize: try heldSize(reference.sha256)) }
        return references
    }

    /// The hashes `value` (a record or a write's value) names under the marker, where a
    /// reference may be, well formed or not: what a store looks up in one query before it
    /// runs the rule on values merged from it.
    package static func hashesMentioned(in value: JSONValue) -> Set<String> {
        guard case .object(let members) = value else { return [] }
        var hashes = Set<String>()
        func add(_ candidate: JSONValue) {
            if case .string(let hash)? = candidate[AttachmentReference.marker], AttachmentReference.isSHA256(hash) { hashes.insert(hash) }
        }
        for member in members {
            switch member.value {
            case .object: add(member.value)
            case .array(let elements): elements.forEach(add)
            default: continue
            }
        }
        return hashes
    }

    /// The hashes a stored record names (see ``hashesMentioned(in:)-JSONValue``).
    package static func hashesMentioned(in record: Record) -> Set<String> {
        guard !record.isHidden, mayRefer(record.bytes), let value = try? JSONReader(bytes: record.bytes).readValue() else { return [] }
        return hashesMentioned(in: value)
    }

    /// The push refusal for a write whose value breaks the rule.
    package static func refusal(_ error: StoreError) -> MutationRefusal {
        MutationRefusal(code: error.code == .missingAttachment ? "missing_attachment" : "invalid_attachment", message: error.message)
    }

    static func mayRefer(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes(AttachmentReference.mayBeReferredTo)
    }
}
