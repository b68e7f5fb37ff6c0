import DeltaSnapCore
import DeltaSnapStore
import Foundation

/// Which partitions each user is a member of, read from the memberships collection of the
/// rules (``AccessRules/memberships``): partition `members/<sub>` holds one record per
/// partition, `{"id":"sets/8271","role":"write"}` (``MembershipRecord``).
///
/// A user's list is read once per version of their memberships partition and kept in a
/// bounded cache, so a poll costs a lookup, not a read, and memory grows with the active
/// users only.
final class MembershipDirectory: @unchecked Sendable {
    typealias Role = MembershipRecord.Role

    private struct Entry {
        var token: ServerToken
        var roles: [String: Role]
    }

    private let collection: String?
    private let store: any CollectionStore
    private let heads: HeadCache
    private let capacity: Int
    private let lock = NSLock()
    private var entries: [String: Entry] = [:]

    init(collection: String?, store: any CollectionStore, heads: HeadCache, capacity: Int = 10_000) {
        self.collection = collection
        self.store = store
        self.heads = heads
        self.capacity = capacity
    }

    /// The partition that holds `subject`'s memberships, when the rules name one.
    func partition(of subject: String) -> CollectionPath? {
        collection.flatMap { CollectionPath(name: $0, key: subject) }
    }

    /// `subject`'s role in `path`, nil when they are not a member.
    func role(of subject: String, in path: CollectionPath) async throws -> Role? {
        try await roles(of: subject)[path.description]
    }

    /// Every partition `subject` is a member of, with their role.
    func roles(of subject: String) async throws -> [String: Role] {
        guard let partition = partition(of: subject), let head = try await heads.head(of: partition.description, store: store) else { return [:] }
        if let cached = lock.withLock({ entries[subject] }), cached.token == head.token { return cached.roles }
        let source = try await store.openRecords(in: partition.description, after: nil)
        var roles: [String: Role] = [:]
        do {
            while try await source.next({ bytes in
                // A record that grants nothing (a bad role, an id that is no partition) is skipped.
                guard let value = try? JSONReader(bytes: Array(bytes)).readValue(), let grant = MembershipRecord.grant(of: value) else { return }
                roles[grant.partition] = grant.role
            }) {}
        } catch {
            await source.close()
            throw error
        }
        await source.close()
        let entry = Entry(token: source.head.token, roles: roles)
        lock.withLock {
            // Bounded: past capacity, forget an arbitrary user (re-read on their next request).
            if entries.count >= capacity, entries[subject] == nil, let victim = entries.keys.first { entries[victim] = nil }
            entries[subject] = entry
        }
        return roles
    }
}
