import DeltaSnapCore
import DeltaSnapStore
import Foundation
import NIOConcurrencyHelpers

/// Which partitions each user is a member of, read from the memberships collection of the
/// rules (``AccessRules/memberships``): partition `members/<sub>` holds one record per
/// partition, `{"id":"sets/8271","role":"write"}` (``MembershipRecord``).
///
/// A user's list is read once per version of their memberships partition and kept in a
/// bounded cache (``BoundedCache``), so a poll costs a lookup, not a read, and memory grows
/// with the active users only.
final class MembershipDirectory: Sendable {
    typealias Role = MembershipRecord.Role

    private struct Entry: Sendable {
        var token: ServerToken
        var roles: [String: Role]
    }

    private let collection: String?
    private let store: any StoreReader
    private let heads: HeadCache
    private let entries: NIOLockedValueBox<BoundedCache<String, Entry>>

    init(collection: String?, store: any StoreReader, heads: HeadCache, capacity: Int = 10_000) {
        self.collection = collection
        self.store = store
        self.heads = heads
        entries = NIOLockedValueBox(BoundedCache(capacity: capacity))
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
        if let cached = entries.withLockedValue({ $0.value(forKey: subject) }), cached.token == head.token { return cached.roles }
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
        entries.withLockedValue { $0.set(entry, forKey: subject) }
        return roles
    }
}
