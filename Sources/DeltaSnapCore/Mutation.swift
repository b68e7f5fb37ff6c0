/// One write a client made offline, as it is queued, pushed and merged.
///
/// A client numbers its writes 1, 2, 3… (`seq`, per client id): the server remembers the
/// highest number it processed, so a batch retried after a lost response is answered again
/// without being applied twice.
///
/// ```swift
/// let rename = Mutation(seq: 7, operation: .patch, id: "AD",
///                       value: .object([JSONMember("name", .string("Andorra la Vella"))]))
/// rename.json   // {"id":"AD","op":"patch","seq":7,"value":{"name":"Andorra la Vella"}}
/// ```
public struct Mutation: Sendable, Equatable {
    /// What a write does to its record.
    public enum Operation: String, Sendable, CaseIterable {
        /// Replace the whole record (create it when absent).
        case put
        /// Merge top-level fields into the record; a `null` field removes it.
        case patch
        /// Create-only: the first arrival for an id wins, a later insert is refused.
        case insert
        /// Hide the record; deleting what is already gone succeeds.
        case delete
    }

    /// The client's write number: positive, increasing in the order the writes were made.
    package var seq: UInt64
    package var operation: Operation
    /// The record's id.
    package var id: String
    /// The record (put, insert) or the fields (patch); `nil` for delete.
    package var value: JSONValue?
    /// The token of the state the device showed when the write was made (its replica's
    /// token then), or nil. A collection merged by `fork` copies a write whose record
    /// changed on the server since (docs/PROTOCOL.md §5.6).
    package var base: String?

    package init(seq: UInt64, operation: Operation, id: String, value: JSONValue? = nil, base: String? = nil) {
        self.seq = seq
        self.operation = operation
        self.id = id
        self.value = value
        self.base = base
    }

    /// The canonical JSON object sent on the wire.
    package var jsonValue: JSONValue {
        var members = [JSONMember]()
        if let base { members.append(JSONMember("base", .string(base))) }
        members.append(JSONMember("id", .string(id)))
        members.append(JSONMember("op", .string(operation.rawValue)))
        members.append(JSONMember("seq", .number(String(seq))))
        if let value { members.append(JSONMember("value", value)) }
        return .object(members)
    }

    /// ``jsonValue`` as canonical text.
    package var json: String { CanonicalJSON.string(jsonValue) }
}

/// Why a write was refused: a stable machine-readable `code` and a sentence for a person.
///
/// The same rules run on the server (which decides) and in the client (which refuses a
/// local write that could never be accepted, before queueing it).
public struct MutationRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: String
    public var message: String

    package init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }

    package static func exists(_ id: String) -> MutationRefusal {
        MutationRefusal(code: "exists", message: "record \"\(id)\" already exists; an insert never replaces a record")
    }

    package static func notFound(_ id: String) -> MutationRefusal {
        MutationRefusal(code: "not_found", message: "record \"\(id)\" does not exist, so it cannot be patched")
    }

    package static func invalid(_ id: String, _ reason: String) -> MutationRefusal {
        MutationRefusal(code: "invalid_record", message: "record \"\(id)\": \(reason)")
    }
}
