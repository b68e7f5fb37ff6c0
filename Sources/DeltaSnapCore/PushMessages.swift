/// The body of `POST /v1/collections/{name}/mutations`: one client's ordered batch.
///
/// ```swift
/// let request = PushRequest(client: "6f1c…", mutations: [
///     Mutation(seq: 1, operation: .delete, id: "AQ"),
/// ])
/// request.bytes   // {"client":"6f1c…","mutations":[{"id":"AQ","op":"delete","seq":1}]}
/// ```
package struct PushRequest: Sendable, Equatable {
    /// The client's id: 1 to 128 characters of `A-Za-z0-9._:-`, generated once per replica.
    package var client: String
    /// Writes with strictly increasing `seq`.
    package var mutations: [Mutation]

    package static let maximumMutations = 1000

    package init(client: String, mutations: [Mutation]) {
        self.client = client
        self.mutations = mutations
    }

    package var bytes: [UInt8] {
        CanonicalJSON.bytes(.object([
            JSONMember("client", .string(client)),
            JSONMember("mutations", .array(mutations.map(\.jsonValue))),
        ]))
    }

    /// Whether `client` is a usable client id.
    package static func isValidClient(_ client: String) -> Bool {
        (1...128).contains(client.utf8.count) && client.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }

    /// Parses a request body. A problem with the batch as a whole (not JSON, no client, a
    /// missing or non-increasing `seq`, too many writes) throws; a problem with one write's
    /// operation, id or value is kept in ``ParsedMutation/refusal`` so it is refused alone.
    package static func parse(_ bytes: [UInt8]) throws(PushRequestError) -> (client: String, mutations: [ParsedMutation]) {
        let value: JSONValue
        do {
            let reader = JSONReader(bytes: bytes)
            value = try reader.readValue()
            guard try reader.isAtEnd() else { throw reader.error("unexpected data after the batch") }
        } catch let error as JSONParseError {
            throw PushRequestError("\(error)")
        } catch {
            throw PushRequestError("\(error)")
        }
        guard case .string(let client)? = value["client"], isValidClient(client) else {
            throw PushRequestError("\"client\" must be a string of 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'")
        }
        guard case .array(let elements)? = value["mutations"] else { throw PushRequestError("\"mutations\" must be an array") }
        guard elements.count <= maximumMutations else {
            throw PushRequestError("a batch holds at most \(maximumMutations) mutations, this one has \(elements.count); split it")
        }
        var parsed: [ParsedMutation] = []
        parsed.reserveCapacity(elements.count)
        var previous: UInt64 = 0
        for (index, element) in elements.enumerated() {
            // Below 2^63: PostgreSQL keeps write numbers in a BIGINT (and 2^63 − 1 writes from one
            // client id is no limit in practice).
            guard case .number(let literal)? = element["seq"], let seq = UInt64(literal), seq > 0, seq <= UInt64(Int64.max) else {
                throw PushRequestError("mutations[\(index)]: \"seq\" must be a positive integer below 2^63")
            }
            guard seq > previous else { throw PushRequestError("mutations[\(index)]: \"seq\" \(seq) does not increase (the one before is \(previous))") }
            previous = seq
            parsed.append(ParsedMutation(seq: seq, element: element))
        }
        return (client, parsed)
    }
}

/// One write of a parsed batch: either a ``Mutation`` or the reason it is refused.
package struct ParsedMutation: Sendable, Equatable {
    package var seq: UInt64
    package var mutation: Mutation?
    package var refusal: MutationRefusal?
    /// The record id, when one could be read (for reports).
    package var id: String?

    init(seq: UInt64, element: JSONValue) {
        self.seq = seq
        guard case .string(let id)? = element["id"], !id.isEmpty else {
            refusal = MutationRefusal(code: "invalid_mutation", message: "\"id\" must be a non-empty string")
            return
        }
        self.id = id
        guard case .string(let name)? = element["op"], let operation = Mutation.Operation(rawValue: name) else {
            refusal = MutationRefusal(code: "invalid_mutation", message: "\"op\" must be one of put, patch, insert, delete")
            return
        }
        var base: String?
        switch element["base"] {
        case nil, .null?: break
        case .string(let token)?: base = token
        default:
            refusal = MutationRefusal(code: "invalid_mutation", message: "\"base\" must be a token string")
            return
        }
        let mutation = Mutation(seq: seq, operation: operation, id: id, value: element["value"], base: base)
        do {
            try RecordMerge.validate(mutation)
            self.mutation = mutation
        } catch {
            refusal = error
        }
    }
}

/// Why a push body was rejected as a whole (answered `400`).
package struct PushRequestError: Error, Sendable, Equatable, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

/// What the server decided for one write.
package struct MutationResult: Sendable, Equatable {
    package enum Status: Sendable, Equatable {
        /// Merged and committed in `version` (or already the server's state then).
        case applied(version: UInt64)
        /// Not applied, and never will be: roll it back and tell the user.
        case refused(MutationRefusal)
        /// Processed in an earlier push whose result is no longer kept: count it as done.
        case duplicate
        /// Committed in `version` as a conflict copy, the new record `copy`: the record had
        /// changed on the server since the write's `base` and its collection merges by `fork`.
        case copied(version: UInt64, copy: String)
    }

    package var seq: UInt64
    package var status: Status

    package init(seq: UInt64, status: Status) {
        self.seq = seq
        self.status = status
    }

    package var jsonValue: JSONValue {
        var members = [JSONMember("seq", .number(String(seq)))]
        switch status {
        case .applied(let version):
            members.append(JSONMember("status", .string("applied")))
            members.append(JSONMember("version", .number(String(version))))
        case .refused(let refusal):
            members.insert(JSONMember("error", .string(refusal.code)), at: 0)
            members.insert(JSONMember("message", .string(refusal.message)), at: 1)
            members.append(JSONMember("status", .string("refused")))
        case .duplicate:
            members.append(JSONMember("status", .string("duplicate")))
        case .copied(let version, let copy):
            members.insert(JSONMember("copy", .string(copy)), at: 0)
            members.append(JSONMember("status", .string("copied")))
            members.append(JSONMember("version", .number(String(version))))
        }
        return .object(members)
    }

    init?(_ value: JSONValue) {
        guard case .number(let literal)? = value["seq"], let seq = UInt64(literal) else { return nil }
        self.seq = seq
        switch value["status"] {
        case .string("applied")?:
            guard case .number(let version)? = value["version"], let number = UInt64(version) else { return nil }
            status = .applied(version: number)
        case .string("refused")?:
            guard case .string(let code)? = value["error"] else { return nil }
            let message: String = if case .string(let text)? = value["message"] { text } else { code }
            status = .refused(MutationRefusal(code: code, message: message))
        case .string("duplicate")?:
            status = .duplicate
        case .string("copied")?:
            guard case .number(let version)? = value["version"], let number = UInt64(version), case .string(let copy)? = value["copy"] else { return nil }
            status = .copied(version: number, copy: copy)
        default:
            return nil
        }
    }
}

/// The `200` answer to a push: one result per write, in the batch's order.
package struct PushResponse: Sendable, Equatable {
    package var collection: String
    package var client: String
    /// The highest `seq` the server has processed for this client.
    package var lastSeq: UInt64
    /// Whether this batch committed a new version.
    package var committed: Bool
    /// The collection's token after the batch (absent while the collection has no version).
    package var token: String?
    package var results: [MutationResult]

    package init(collection: String, client: String, lastSeq: UInt64, committed: Bool, token: String?, results: [MutationResult]) {
        self.collection = collection
        self.client = client
        self.lastSeq = lastSeq
        self.committed = committed
        self.token = token
        self.results = results
    }

    package var bytes: [UInt8] {
        var members = [
            JSONMember("client", .string(client)),
            JSONMember("collection", .string(collection)),
            JSONMember("committed", .bool(committed)),
            JSONMember("lastSeq", .number(String(lastSeq))),
            JSONMember("results", .array(results.map(\.jsonValue))),
        ]
        if let token { members.append(JSONMember("token", .string(token))) }
        var out = CanonicalJSON.bytes(.object(members))
        out.append(UInt8(ascii: "\n"))
        return out
    }

    /// Parses a `200` push answer; nil when it is not one (the client then retries the batch).
    package static func parse(_ bytes: [UInt8]) -> PushResponse? {
        guard let value = try? JSONReader(bytes: bytes).readValue(),
              case .string(let collection)? = value["collection"],
              case .string(let client)? = value["client"],
              case .number(let last)? = value["lastSeq"], let lastSeq = UInt64(last),
              case .array(let elements)? = value["results"]
        else { return nil }
        var results: [MutationResult] = []
        for element in elements {
            guard let result = MutationResult(element) else { return nil }
            results.append(result)
        }
        let committed = value["committed"] == .bool(true)
        let token: String? = if case .string(let text)? = value["token"] { text } else { nil }
        return PushResponse(collection: collection, client: client, lastSeq: lastSeq, committed: committed, token: token, results: results)
    }
}
