import DeltaSnapCore
import DeltaSnapStore

/// The one rule of a membership record (docs/PROTOCOL.md §10.2): in partition `members/<sub>`
/// of the memberships collection, `{"id":"sets/8271","role":"write"}` makes user `sub` a
/// member of partition `sets/8271`.
///
/// It fails closed: only the exact strings `"read"` and `"write"` grant anything. Any other
/// role — missing, `null`, `""`, `"none"`, `"READ"`, `1`, `["write"]` — grants nothing when
/// read, and a write that would store one is refused (``problem(id:value:)``), so a backend
/// that "revokes" by setting a role learns at once that it must delete the record instead.
///
/// ```swift
/// MembershipRecord.grant(of: try JSONReader(bytes: Array(#"{"id":"sets/1","role":"read"}"#.utf8)).readValue())
/// // ("sets/1", .read)
/// MembershipRecord.problem(id: "sets/1", value: .object([JSONMember("role", .string("none"))]))
/// // record "sets/1": role "none" grants nothing; a membership's role is "read" or "write" (delete the record to revoke it)
/// ```
package enum MembershipRecord {
    /// What a membership allows: `read`, or `write` (read and write).
    package enum Role: String, Sendable, Equatable {
        case read, write
    }

    /// The partition and role a stored record grants; nil for one that grants nothing.
    static func grant(of value: JSONValue) -> (partition: String, role: Role)? {
        guard case .string(let id)? = value[Record.idKey], CollectionPath(id)?.key != nil,
              case .string(let word)? = value["role"], let role = Role(rawValue: word)
        else { return nil }
        return (id, role)
    }

    /// Why `value`, written whole as record `id` of the memberships collection, would grant
    /// nothing (one line); nil when it is a good membership or hides one.
    package static func problem(id: String, value: JSONValue) -> String? {
        if value[Record.hiddenKey] == .bool(true) { return nil }
        if let problem = idProblem(id) { return problem }
        return roleProblem(id, value["role"])
    }

    /// Why `fields`, merged into record `id` by a patch, would leave a membership that grants
    /// nothing; nil when the patch keeps the role good (or leaves it as it is).
    static func problem(patching id: String, fields: JSONValue) -> String? {
        if let problem = idProblem(id) { return problem }
        guard let role = fields["role"] else { return nil }
        return roleProblem(id, role)
    }

    /// Why the record `value` of a batch would grant nothing; nil when it is good.
    package static func problem(in record: Record) -> String? {
        if record.isHidden { return nil }
        guard let value = try? JSONReader(bytes: record.bytes).readValue() else { return nil }
        return problem(id: record.id, value: value)
    }

    private static func idProblem(_ id: String) -> String? {
        guard CollectionPath(id)?.key == nil else { return nil }
        return "record \(quoted(id)): a membership's id names a partition, NAME/KEY (e.g. \"sets/8271\")"
    }

    private static func roleProblem(_ id: String, _ role: JSONValue?) -> String? {
        if case .string(let word)? = role, Role(rawValue: word) != nil { return nil }
        let given = role.map { "role \(CanonicalJSON.string($0))" } ?? "no role"
        return "record \(quoted(id)): \(given) grants nothing; a membership's role is \"read\" or \"write\" (delete the record to revoke it)"
    }

    private static func quoted(_ text: String) -> String { CanonicalJSON.string(.string(text)) }
}

extension APIError {
    /// `400`: writes to the memberships collection that would store a membership granting
    /// nothing, one line each.
    static func badMembership(_ problems: [String]) -> APIError {
        APIError(.badRequest, "bad_membership", problems.joined(separator: "\n"))
    }
}
