import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapTestSupport
import Foundation
import Testing

/// Ordered lists without rank rewrites (issue 21, item 1): each term carries a fractional
/// rank key; inserting, deleting or moving a term writes that term only (a patch of its
/// `rank` field, merged per field), so two devices editing one list offline converge.
extension TwoWaySyncTests {
    /// The ids in list order: by rank, ties by id.
    func listOrder(_ replica: DeltaSnapReplica) async throws -> [String] {
        try await replica.query(ReplicaQuery().filter("list", .equal, .string("L")).order(by: "rank")).compactMap {
            if case .string(let id)? = $0["id"] { return id }
            return nil
        }
    }

    func rank(_ replica: DeltaSnapReplica, _ id: String) async throws -> String? {
        for term in try await replica.query(ReplicaQuery().filter("id", .equal, .string(id))) {
            if case .string(let rank)? = term["rank"] { return rank }
        }
        return nil
    }

    @Test(arguments: [false, true])
    func twoDevicesEditingOneListOfflineConvergeWithoutRankRewrites(phoneFirst: Bool) async throws {
        try await withWorld { world in
            let ranks = try FractionalRank.n(keysBetween: nil, nil, count: 4)
            let terms = (1...4).map { #"{"id":"t\#($0)","list":"L","rank":"\#(ranks[$0 - 1])","text":"term \#($0)"}"# }
            try Fixtures.importText(terms.joined(separator: "\n"), into: world.store, collection: "notes")
            let phone = try world.replica("phone")
            let laptop = try world.replica("laptop")
            try await settle(phone, world)
            try await settle(laptop, world)
            #expect(try await listOrder(phone) == ["t1", "t2", "t3", "t4"])

            // Offline, at the same time. Both insert between t1 and t2 (jittered keys);
            // the phone deletes t4 and moves t1 to the end, the laptop moves t3 to the front.
            var random = SystemRandomNumberGenerator()
            let phoneKey = try FractionalRank.between(ranks[0], ranks[1], jitter: &random)
            let laptopKey = try FractionalRank.between(ranks[0], ranks[1], jitter: &random)
            try await phone.insert(id: "p", json: #"{"list":"L","rank":"\#(phoneKey)","text":"from the phone"}"#)
            try await phone.delete(id: "t4")
            let end = try FractionalRank.between(ranks[2], nil)  // after t3, the phone's last term now
            try await phone.patch(id: "t1", json: #"{"rank":"\#(end)"}"#)
            try await laptop.insert(id: "l", json: #"{"list":"L","rank":"\#(laptopKey)","text":"from the laptop"}"#)
            let front = try FractionalRank.between(nil, ranks[0])
            try await laptop.patch(id: "t3", json: #"{"rank":"\#(front)"}"#)
            #expect(try await listOrder(phone) == ["p", "t2", "t3", "t1"])
            #expect(try await listOrder(laptop) == ["t3", "t1", "l", "t2", "t4"])

            let (first, second) = phoneFirst ? (phone, laptop) : (laptop, phone)
            await first.sync()
            await second.sync()
            try await settle(first, world)
            try await settle(second, world)

            // The same order everywhere: what each user moved, and nothing else.
            let inserted = phoneKey < laptopKey || (phoneKey == laptopKey && "l" > "p") ? ["p", "l"] : ["l", "p"]
            let expected = ["t3"] + inserted + ["t2", "t1"]
            #expect(try await listOrder(phone) == expected)
            #expect(try await listOrder(laptop) == expected)
            #expect(try world.dump("phone") == world.export() && world.dump("laptop") == world.export())
            // No rank rewritten but the moved ones.
            for replica in [phone, laptop] {
                var held: [String: String] = [:]
                for id in ["t1", "t2", "t3", "p", "l"] { held[id] = try await rank(replica, id) }
                #expect(held == ["t1": end, "t2": ranks[1], "t3": front, "p": phoneKey, "l": laptopKey])
            }
            #expect(try world.store.history(of: "t2", in: "notes").isEmpty)
        }
    }
}
