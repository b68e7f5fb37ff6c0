import DeltaSnapCore

/// How one record differs between a published state and a state under review: added,
/// removed, or changed — with each changed top-level member's old and new value, which is
/// what a reviewer reads (`deltasnap review show`: `~ ID member: old → new`).
///
/// ```swift
/// let change = RecordChange(before: published, after: workspace)!
/// change.members   // [("name", .string("Andorra"), .string("Andorra (updated)"))]
/// ```
package struct RecordChange: Sendable, Equatable {
    package enum Kind: String, Sendable {
        case added, removed, changed
    }

    package var id: String
    package var kind: Kind
    /// The published record (nil: added).
    package var before: Record?
    /// The record under review (nil: removed).
    package var after: Record?

    /// The change from `before` to `after` (visible records, or nil for absent); nil when they are the same.
    package init?(before: Record?, after: Record?) {
        let before = before?.isHidden == true ? nil : before
        let after = after?.isHidden == true ? nil : after
        guard let id = before?.id ?? after?.id, before?.bytes != after?.bytes else { return nil }
        self.id = id
        self.before = before
        self.after = after
        kind = before == nil ? .added : after == nil ? .removed : .changed
    }

    /// One top-level member that differs: its value before and after (nil: absent).
    package struct Member: Sendable, Equatable {
        package var name: String
        package var old: JSONValue?
        package var new: JSONValue?
    }

    /// The top-level members that differ, in key order (every member for an added or removed record).
    package var members: [Member] {
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
    package var json: JSONValue {
        let members: [JSONValue] = members.map { member in
            var fields = [JSONMember("member", .string(member.name))]
            if let new = member.new { fields.append(JSONMember("new", new)) }
            if let old = member.old { fields.append(JSONMember("old", old)) }
            return .object(fields)
        }
        return .object([JSONMember("change", .string(kind.rawValue)), JSONMember(Record.idKey, .string(id)), JSONMember("members", .array(members))])
    }
}

/// Reads a collection's visible records in id order, for a merge of two of them: a whole
/// collection as one stream (one read transaction: an approval's diff), or a page at a time
/// (``CollectionStore/openPage(of:after:limit:)``) for a page of a diff, which then reads only
/// as far as its changes lie, in pages that grow. Paged reads are separate transactions:
/// callers that need one state hold the review lock, under which neither side changes.
final class RecordMergeCursor {
    private let store: any StoreReader
    private let collection: String
    private var stream: (any RecordSource)?
    private var page: [Record] = []
    private var position = 0
    private var pageSize = 256
    private var exhausted = false

    private init(store: any StoreReader, collection: String) {
        self.store = store
        self.collection = collection
    }

    /// A cursor on `collection`'s visible records after id `after` (nil: from the first), on
    /// the first of them; nil when the collection does not exist. `paged`: read a page at a time.
    static func open(_ collection: String, in store: any StoreReader, after: String?, paged: Bool) async throws -> RecordMergeCursor? {
        guard try await store.head(of: collection) != nil else { return nil }
        let cursor = RecordMergeCursor(store: store, collection: collection)
        if paged || after != nil {
            try await cursor.fetch(after: after)
        } else {
            cursor.stream = try await store.openRecords(in: collection, after: nil)
            try await cursor.advance()
        }
        return cursor
    }

    /// The record the cursor is on; nil once the collection is exhausted.
    var current: Record? { position < page.count ? page[position] : nil }

    func advance() async throws {
        if let stream {
            var next: Record?
            _ = try await stream.next { next = try Record.parse(Array($0)) }
            page = next.map { [$0] } ?? []
            position = 0
            return
        }
        position += 1
        if position >= page.count, !exhausted, let last = page.last { try await fetch(after: last.id) }
    }

    /// Ends a streamed read (a paged cursor holds none).
    func close() async {
        await stream?.close()
        stream = nil
    }

    private func fetch(after id: String?) async throws {
        let limit = pageSize
        pageSize = min(pageSize * 4, 16_384)
        let records = try await store.withPage(of: collection, after: id, limit: limit) { source in
            var records: [Record] = []
            while try await source.next({ records.append(try Record.parse(Array($0))) }) {}
            return records
        }
        page = records
        position = 0
        exhausted = records.count < limit
    }
}

extension StoreReader {
    /// The records that differ between `published` and `proposed` (either may not exist: no
    /// records), in id order, after id `after`; at most `limit` (nil: all). `more`: whether
    /// changes follow the last one returned.
    package func changes(
        from published: String, to proposed: String, after: String? = nil, limit: Int? = nil
    ) async throws -> (changes: [RecordChange], more: Bool) {
        // A page of a diff pages through both sides; a whole diff streams them.
        let paged = limit != nil
        let old = try await RecordMergeCursor.open(published, in: self, after: after, paged: paged)
        let new: RecordMergeCursor?
        do {
            new = try await RecordMergeCursor.open(proposed, in: self, after: after, paged: paged)
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
