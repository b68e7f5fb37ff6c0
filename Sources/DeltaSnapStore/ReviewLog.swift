import DeltaSnapCore

/// A step of a review: what `GET …/review/log` lists and what decides whether a request is
/// pending (the last step is a request).
package enum ReviewStep: String, Sendable, CaseIterable {
    case request, approve, decline, rollback
}

/// One line of a review's audit log: who did what, when, to which version, and why.
///
/// ```json
/// {"at":1767229200,"by":"bob","changes":1003,"comment":"ok","id":"0000000002","previousVersion":7,"step":"approve","version":8}
/// ```
package struct ReviewLogEntry: Sendable, Equatable {
    /// 1, 2, … in the order the steps were taken.
    package var sequence: Int
    package var step: ReviewStep
    /// The JWT `sub` of who took the step ("admin" for the admin token).
    package var by: String
    /// Seconds since 1970.
    package var at: Int64
    package var comment: String?
    /// A request: the workspace version it froze. An approval or rollback: the published
    /// version it made (nil when it changed nothing).
    package var version: UInt64?
    /// An approval or rollback: the published version before it (0: none existed).
    package var previousVersion: UInt64?
    /// How many records the step changes (a request: the changes under review).
    package var changes: Int
    /// A rollback: the published version restored.
    package var restoredVersion: UInt64?
    /// A rollback of chosen records only: their ids.
    package var restoredIDs: [String]?
    /// A rollback taken while a request waited: that request's sequence. The rollback ends it
    /// (withdrawn: it leaves the queue, nothing it froze is published; request again).
    package var withdrewRequest: Int?

    package init(
        sequence: Int, step: ReviewStep, by: String, at: Int64, comment: String? = nil, version: UInt64? = nil, previousVersion: UInt64? = nil,
        changes: Int = 0, restoredVersion: UInt64? = nil, restoredIDs: [String]? = nil, withdrewRequest: Int? = nil
    ) {
        self.sequence = sequence
        self.step = step
        self.by = by
        self.at = at
        self.comment = comment
        self.version = version
        self.previousVersion = previousVersion
        self.changes = changes
        self.restoredVersion = restoredVersion
        self.restoredIDs = restoredIDs
        self.withdrewRequest = withdrewRequest
    }

    /// Whether this step published (an approval or a rollback).
    package var published: Bool { step == .approve || step == .rollback }

    /// The record id of entry `sequence`: zero-padded, so id order is the log's order.
    static func id(_ sequence: Int) -> String {
        let digits = String(sequence)
        return String(repeating: "0", count: max(0, 10 - digits.count)) + digits
    }

    /// The entry as a JSON object (the log endpoint's element, without `id`).
    package var json: JSONValue {
        var members: [JSONMember] = [
            JSONMember("at", .number(String(at))), JSONMember("by", .string(by)), JSONMember("changes", .number(String(changes))),
            JSONMember("sequence", .number(String(sequence))), JSONMember("step", .string(step.rawValue)),
        ]
        if let comment { members.append(JSONMember("comment", .string(comment))) }
        if let version { members.append(JSONMember("version", .number(String(version)))) }
        if let previousVersion { members.append(JSONMember("previousVersion", .number(String(previousVersion)))) }
        if let restoredVersion { members.append(JSONMember("restoredVersion", .number(String(restoredVersion)))) }
        if let restoredIDs { members.append(JSONMember("restoredIds", .array(restoredIDs.map(JSONValue.string)))) }
        if let withdrewRequest { members.append(JSONMember("withdrewRequest", .number(String(withdrewRequest)))) }
        members.sort { $0.key.utf8Precedes($1.key) }
        return .object(members)
    }

    /// The entry as a record: of the log (`id` nil: its sequence), or of the queue of pending
    /// requests (`id`: the path it asks about).
    func record(id: String? = nil) throws -> Record {
        guard case .object(var members) = json else { fatalError("an entry is an object") }
        members.append(JSONMember(Record.idKey, .string(id ?? Self.id(sequence))))
        members.sort { $0.key.utf8Precedes($1.key) }
        return try Record(parsing: .object(members))
    }

    /// The entry a log record holds, or nil for a record that is not one.
    init?(record: Record) {
        guard !record.isHidden, let value = try? JSONReader(bytes: record.bytes).readValue(),
              case .string(let stepName)? = value["step"], let step = ReviewStep(rawValue: stepName),
              case .string(let by)? = value["by"], let at = Self.integer(value["at"]), let sequence = Self.integer(value["sequence"])
        else { return nil }
        var ids: [String]?
        if case .array(let list)? = value["restoredIds"] {
            ids = list.compactMap { if case .string(let id) = $0 { id } else { nil } }
        }
        let comment: String? = if case .string(let text)? = value["comment"] { text } else { nil }
        self.init(
            sequence: Int(sequence), step: step, by: by, at: at, comment: comment, version: Self.integer(value["version"]).map(UInt64.init),
            previousVersion: Self.integer(value["previousVersion"]).map(UInt64.init), changes: Int(Self.integer(value["changes"]) ?? 0),
            restoredVersion: Self.integer(value["restoredVersion"]).map(UInt64.init), restoredIDs: ids,
            withdrewRequest: Self.integer(value["withdrewRequest"]).map(Int.init))
    }

    private static func integer(_ value: JSONValue?) -> Int64? {
        guard case .number(let text)? = value else { return nil }
        return Int64(text)
    }
}

/// A review's log and what it means now.
package struct ReviewState: Sendable, Equatable {
    /// Every step, oldest first.
    package var log: [ReviewLogEntry]

    package init(log: [ReviewLogEntry]) {
        self.log = log
    }

    /// The request waiting for a decision: the last step, when it is a request.
    package var pending: ReviewLogEntry? {
        guard let last = log.last, last.step == .request else { return nil }
        return last
    }

    /// The sequence number the next step gets.
    var nextSequence: Int { (log.last?.sequence ?? 0) + 1 }
}
