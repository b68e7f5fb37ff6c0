/// The conflict copy a collection merged by `fork` makes of a write whose record changed on
/// the server since the device saw it (Bipsync's "forking", Apple Notes, Dropbox): the write
/// lands in a new record next to the original instead of overwriting it, and the user sees
/// both.
///
/// The copy's id derives from the original id and the write alone (client id and `seq`),
/// so a retried push names the same copy; its value is what the write would have made of
/// the record as the server holds it, plus ``originalField`` naming the original.
///
/// ```swift
/// ConflictCopy.id(of: "n1", client: "6f1c…", seq: 7)   // "n1~conflict-3f9a0c12d4e5b6a7"
/// ```
package enum ConflictCopy {
    /// The member of a copy that names the record it copies.
    package static let originalField = "conflictOf"

    /// The copy's id: the original id, `~conflict-`, and 16 hex digits of the write's hash.
    package static func id(of id: String, client: String, seq: UInt64) -> String {
        let hash = XXH64.hash(Array("\(client)\u{0}\(seq)".utf8))
        let hex = String(hash, radix: 16)
        return "\(id)~conflict-" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// The copy of `mutation` (a put or a patch) over `current`, the server's value of the
    /// original: the write's result, under `copyID`, pointing at the original.
    package static func record(of mutation: Mutation, over current: Record?, copyID: String) throws(MutationRefusal) -> Record? {
        var asPut = mutation
        asPut.operation = .put
        asPut.id = copyID
        let written = RecordMerge.applyPending(mutation, to: current).flatMap { record -> JSONValue? in
            try? JSONReader(bytes: record.bytes).readValue()
        }
        guard case .object(var members)? = written else { return nil }
        members.removeAll { $0.key == Record.idKey || $0.key == originalField }
        members.append(JSONMember(originalField, .string(mutation.id)))
        asPut.value = .object(members)
        return try RecordMerge.apply(asPut, to: nil)
    }
}
