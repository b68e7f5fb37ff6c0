import DeltaSnapCore

/// How one record differs between a published state and a state under review: added,
/// removed, or changed — with each changed top-level member's old and new value, which is
/// what a reviewer reads (`deltasnap review show`: `~ ID member: old → new`).
///
/// ```swift
/// let change = RecordChange(before: published, after: workspace)!
/// change.members   // [("name", .string("Andorra"), .string("Andorra (updated)"))]
/// ```
public struct RecordChange: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case added, removed, changed
    }

    public var id: String
    public var kind: Kind
    /// The published record (nil: added).
    public var before: Record?
    /// The record under review (nil: removed).
    public var after: Record?

    /// The change from `before` to `after` (visible records, or nil for absent); nil when they are the same.
    public init?(before: Record?, after: Record?) {
        let before = before?.isHidden == true ? nil : before
        let after = after?.isHidden == true ? nil : after
        guard let id = before?.id ?? after?.id, before?.bytes != after?.bytes else { return nil }
        self.id = id
        self.before = before
        self.after = after
        kind = before == nil ? .added : after == nil ? .removed : .changed
    }

    /// One top-level member that differs: its value before and after (nil: absent).
    public struct Member: Sendable, Equatable {
        public var name: String
        public var old: JSONValue?
        public var new: JSONValue?
    }

    /// The top-level members that differ, in key order (every member for an added or removed record).
    public var members: [Member] {
        let old = Self.members(of: before)
        let new = Self.members(of: after)
        var names = Set(old.keys).union(new.keys)
        names.remove(Record.idKey)
        return names.sorted { $0.utf8Precedes($1) }.compactMap { name in
            old[name] == new[name] ? nil : Member(name: name, old: old[name], new: new[name])
        }
    }

    private static func members(of record: Record?) -> [String: JSONValue] {
        guard let record, case .object(let members)? = try? JSONReader(bytes: record.bytes).readValue() else { return [:] }
        return Dictionary(members.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// The change as the review endpoint lists it: `{"change":…,"id":…,"members":[{"member":…,"new":…,"old":…}]}`
    /// (a member absent on one side has no `old` or `new`).
    public var json: JSONValue {
        let members: [JSONValue] = members.map { member in
            var fields = [JSONMember("member", .string(member.name))]
            if let new = member.new { fields.append(JSONMember("new", new)) }
            if let old = member.old { fields.append(JSONMember("old", old)) }
            return .object(fields)
        }
        return .object([JSONMember("change", .string(kind.rawValue)), JSONMember(Record.idKey, .string(id)), JSONMember("members", .array(members))])
    }
}

/// Reads a ``RecordSource`` one record at a time, for a merge of two id-ordered sources.
final class RecordMergeCursor {
    private let source: any RecordSource
    /// The record the cursor is on; nil once the source is exhausted.
    private(set) var current: Record?

    private init(_ source: any RecordSource) {
        self.source = source
    }

    /// A cursor on `collection`'s visible records (none when it does not exist), on its first record.
    static func open(_ collection: String, in store: any CollectionStore) async throws -> RecordMergeCursor? {
        guard try await store.head(of: collection) != nil else { return nil }
        let cursor = RecordMergeCursor(try await store.openRecords(in: collection, after: nil))
        try await cursor.advance()
        return cursor
    }

    func advance() async throws {
        var next: Record?
        _ = try await source.next { bytes in next = try Record.parse(Array(bytes)) }
        current = next
    }

    func close() async {
        await source.close()
    }
}

extension CollectionStore {
    /// The records that differ between `published` and `proposed` (either may not exist: no
    /// records), in id order, after id `after`; at most `limit` (nil: all). `more`: whether
    /// changes follow the last one returned.
    public func changes(
        from published: String, to proposed: String, after: String? = nil, limit: Int? = nil
    ) async throws -> (changes: [RecordChange], more: Bool) {
        let old = try await RecordMergeCursor.open(published, in: self)
        let new: RecordMergeCursor?
        do {
            new = try await RecordMergeCursor.open(proposed, in: self)
        } catch {
            await old?.close()
            throw error
        }
        do {
            let result = try await Self.merge(old, new, after: after, limit: limit)
            await old?.close()
            await new?.close()
            return result
        } catch {
            await old?.close()
            await new?.close()
            throw error
        }
    }

    private static func merge(_ old: RecordMergeCursor?, _ new: RecordMergeCursor?, after: String?, limit: Int?) async throws -> (changes: [RecordChange], more: Bool) {
        var found: [RecordChange] = []
        while true {
            let a = old?.current
            let b = new?.current
            guard a != nil || b != nil else { return (found, false) }
            let change: RecordChange?
            if let a, let b, a.id == b.id {
                change = RecordChange(before: a, after: b)
                try await old?.advance()
                try await new?.advance()
            } else if let a, b == nil || a.id.utf8Precedes(b!.id) {
                change = RecordChange(before: a, after: nil)
                try await old?.advance()
            } else {
                change = RecordChange(before: nil, after: b)
                try await new?.advance()
            }
            guard let change else { continue }
            if let after, !after.utf8Precedes(change.id) { continue }
            if let limit, found.count == limit { return (found, true) }
            found.append(change)
        }
    }
}
