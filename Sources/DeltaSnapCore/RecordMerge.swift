/// The merge rule of two-way sync: what a ``Mutation`` makes of a record's current value.
///
/// The server applies it in its commit order (last writer wins per field); the client runs
/// the same rule to show its pending writes on top of the last verified server state, so
/// what the user sees while offline is what the server will most likely decide.
///
/// ```swift
/// let current = try Record(json: Array(#"{"id":"AD","name":"Andorra","pop":77000}"#.utf8))
/// let patch = Mutation(seq: 1, operation: .patch, id: "AD",
///                      value: .object([JSONMember("pop", .null), JSONMember("tld", .string(".ad"))]))
/// try RecordMerge.apply(patch, to: current)?.text   // {"id":"AD","name":"Andorra","tld":".ad"}
/// ```
package enum RecordMerge {
    /// The record after `mutation`, or `nil` when it leaves the record absent (a delete).
    /// `current` is the visible record, or `nil` when it is absent or hidden.
    /// Throws the refusal the server answers with.
    package static func apply(_ mutation: Mutation, to current: Record?) throws(MutationRefusal) -> Record? {
        let id = mutation.id
        try validateID(id)
        switch mutation.operation {
        case .delete:
            return nil
        case .put:
            return try record(id: id, members: try members(of: mutation))
        case .insert:
            if current != nil { throw MutationRefusal.exists(id) }
            return try record(id: id, members: try members(of: mutation))
        case .patch:
            guard let current else { throw MutationRefusal.notFound(id) }
            return try record(id: id, members: merged(try members(of: mutation), into: current))
        }
    }

    /// The lenient form the client uses to show pending writes over a newer server state:
    /// a pending insert shows its own value even if the id appeared meanwhile, and a patch of
    /// a record that disappeared shows nothing. The server's answer settles it later.
    package static func applyPending(_ mutation: Mutation, to current: Record?) -> Record? {
        var mutation = mutation
        if mutation.operation == .insert { mutation.operation = .put }
        return (try? apply(mutation, to: current)) ?? current
    }

    /// Checks a mutation's shape without a current value (for a client's local write).
    package static func validate(_ mutation: Mutation) throws(MutationRefusal) {
        try validateID(mutation.id)
        if mutation.operation != .delete { _ = try members(of: mutation) }
    }

    /// The deepest a written value may nest: a push batch wraps it in three more levels and
    /// the whole batch must stay within ``JSONReader/maximumDepth``.
    package static let maximumValueDepth = JSONReader.maximumDepth - 3

    private static func validateID(_ id: String) throws(MutationRefusal) {
        guard !id.isEmpty else { throw MutationRefusal.invalid(id, RecordError.emptyID.description) }
        // SQLite binds text up to its first NUL: such an id would address another record.
        guard !id.utf8.contains(0) else { throw MutationRefusal.invalid(id, RecordError.idContainsNUL.description) }
    }

    private static func members(of mutation: Mutation) throws(MutationRefusal) -> [JSONMember] {
        let id = mutation.id
        guard let value = mutation.value, case .object(let members) = value else {
            throw MutationRefusal.invalid(id, "a \(mutation.operation.rawValue) needs a JSON object as its value")
        }
        guard value.depth <= maximumValueDepth else {
            throw MutationRefusal.invalid(id, "the value nests deeper than \(maximumValueDepth) levels")
        }
        for member in members {
            if member.key == Record.hiddenKey {
                throw MutationRefusal(code: "reserved_field", message: "record \"\(id)\": \"hidden\" is reserved; use a delete to hide a record")
            }
            if member.key == Record.idKey, member.value != .string(id) {
                throw MutationRefusal(code: "id_mismatch", message: "record \"\(id)\": the value's \"id\" must equal the write's id")
            }
        }
        return members
    }

    /// `current`'s fields with `patch` merged in: a `null` removes a field (RFC 7396 at the top level).
    private static func merged(_ patch: [JSONMember], into current: Record) throws(MutationRefusal) -> [JSONMember] {
        let value: JSONValue
        do {
            value = try JSONReader(bytes: current.bytes).readValue()
        } catch {
            throw MutationRefusal.invalid(current.id, "the stored record is not valid JSON: \(error)")
        }
        guard case .object(let members) = value else { throw MutationRefusal.invalid(current.id, RecordError.notAnObject.description) }
        return merge(patch, into: members)
    }

    /// `patch`'s fields set over `members` at the top level (RFC 7396 there): each replaces
    /// its namesake, and a `null` removes it — or, with `keepingNulls` (two patches combined
    /// into one, ``WriteCoalescing``), stays as the removal it asks for.
    package static func merge(_ patch: [JSONMember], into members: [JSONMember], keepingNulls: Bool = false) -> [JSONMember] {
        var members = members
        for field in patch {
            members.removeAll { $0.key == field.key }
            if keepingNulls || field.value != .null { members.append(field) }
        }
        return members
    }

    private static func record(id: String, members: [JSONMember]) throws(MutationRefusal) -> Record {
        var members = members.filter { $0.key != Record.idKey }
        members.append(JSONMember(Record.idKey, .string(id)))
        members.sort { $0.key.utf8Precedes($1.key) }
        do {
            return try Record(parsing: .object(members))
        } catch {
            throw MutationRefusal.invalid(id, error.description)
        }
    }
}
