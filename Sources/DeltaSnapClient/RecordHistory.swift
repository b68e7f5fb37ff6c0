import DeltaSnapCore
import Foundation

/// One value a push replaced in a record, as `GET …/records/{id}/history` lists it
/// (docs/PROTOCOL.md §5.7): what a user can look back at, and revert to.
public struct RecordHistoryEntry: Sendable, Equatable {
    /// The record as it was.
    public var value: JSONValue
    /// The version that had written ``value``: the number ``DeltaSnapReplica/revert(_:to:)`` takes.
    public var version: UInt64
    /// The version whose commit replaced it.
    public var replacedIn: UInt64
    /// The HTTP date of that commit.
    public var replacedAt: String
    /// The client id whose push replaced it.
    public var replacedBy: String
    /// The entry as the server sent it (unknown members included).
    public var json: JSONValue

    /// Reads one entry of a history answer; nil when a member is missing or of another type.
    init?(_ json: JSONValue) {
        guard let value = json["value"], case .object = value,
              case .number(let version)? = json["version"], let version = UInt64(version),
              case .number(let replacedIn)? = json["replacedIn"], let replacedIn = UInt64(replacedIn),
              case .string(let replacedAt)? = json["replacedAt"], case .string(let replacedBy)? = json["replacedBy"]
        else { return nil }
        self.value = value
        self.version = version
        self.replacedIn = replacedIn
        self.replacedAt = replacedAt
        self.replacedBy = replacedBy
        self.json = json
    }
}

/// Why a record's history could not be read, or a revert not queued.
public enum RecordHistoryError: Error, Equatable, CustomStringConvertible {
    /// The server answered something other than a history (`status`, its message).
    case refused(id: String, status: Int, message: String)
    /// A `200` whose body is not a history.
    case unreadable(id: String)
    /// No history entry names `version` (the versions it does list, newest first).
    case noSuchVersion(id: String, version: UInt64, listed: [UInt64])

    public var description: String {
        switch self {
        case .refused(let id, let status, let message):
            "history of \"\(id)\": status \(status): \(message)"
        case .unreadable(let id):
            "history of \"\(id)\": the answer is not a history"
        case .noSuchVersion(let id, let version, let listed):
            "record \"\(id)\" has no history entry for version \(version)"
                + (listed.isEmpty ? " (it has no history)" : " (versions in its history: \(listed.map(String.init).joined(separator: ", ")))")
        }
    }
}

/// Reads a record's history from a server (`deltasnap history` and ``DeltaSnapReplica/history(of:limit:)``).
///
/// ```swift
/// let entries = try await RecordHistory.fetch(
///     collectionURL: URL(string: "http://127.0.0.1:8080/v1/collections/notes")!, id: "n1")
/// for entry in entries { print(entry.version, entry.replacedAt, entry.value) }
/// ```
public enum RecordHistory {
    /// The most entries one request may ask for.
    public static let maximumLimit = 1000

    /// The values pushes replaced in record `id`, newest first, at most `limit` (1…1000).
    public static func fetch(
        collectionURL: URL, id: String, limit: Int = 100, accessToken: String? = nil,
        transport: any SyncTransport = URLSessionTransport(), timeout: Duration = .seconds(30)
    ) async throws -> [RecordHistoryEntry] {
        var url = collectionURL.appendingSegments("records", id, "history")
        if var components = URLComponents(url: url, resolvingAgainstBaseURL: true) {
            components.queryItems = [URLQueryItem(name: "limit", value: String(limit))]
            url = components.url ?? url
        }
        var headers = SyncRequest.headers(accessToken: accessToken)
        headers["Accept"] = "application/json"
        let response = try await transport.fetch(SyncRequest(url: url, headers: headers, timeout: timeout))
        let body = DeltaSnapReplica.readBody(response)
        guard response.status == 200 else {
            throw RecordHistoryError.refused(id: id, status: response.status, message: ServerErrorBody(body)?.message ?? "unexpected answer")
        }
        let value = try? JSONReader(bytes: body).readValue()
        guard case .array(let list)? = value?["history"] else { throw RecordHistoryError.unreadable(id: id) }
        return try list.map { json in
            guard let entry = RecordHistoryEntry(json) else { throw RecordHistoryError.unreadable(id: id) }
            return entry
        }
    }
}

extension DeltaSnapReplica {
    /// The values pushes replaced in record `id` on this replica's server, newest first.
    ///
    /// ```swift
    /// for entry in try await replica.history(of: "n1") { print(entry.version, entry.value) }
    /// ```
    public func history(of id: String, limit: Int = 100) async throws -> [RecordHistoryEntry] {
        try await RecordHistory.fetch(collectionURL: url, id: id, limit: limit, accessToken: accessToken, transport: transport, timeout: timeout)
    }

    /// Queues a `put` of the value record `id` had at `version` (a ``RecordHistoryEntry/version``
    /// of its history) and shows it locally at once; returns the write's `seq`.
    ///
    /// A revert is an ordinary write: pushed by the next ``sync(now:ignoringBackoff:)``,
    /// merged like any other, and the value it replaces goes to history in turn — so a
    /// revert can itself be reverted.
    ///
    /// ```swift
    /// let entries = try await replica.history(of: "n1")
    /// try await replica.revert("n1", to: entries[0].version)   // back to the value before the last push
    /// await replica.sync()
    /// ```
    @discardableResult
    public func revert(_ id: String, to version: UInt64) async throws -> UInt64 {
        let entries = try await history(of: id, limit: RecordHistory.maximumLimit)
        guard let entry = entries.first(where: { $0.version == version }) else {
            throw RecordHistoryError.noSuchVersion(id: id, version: version, listed: entries.map(\.version))
        }
        return try storage.enqueue(.put, id: id, value: entry.value, now: Date())
    }
}
