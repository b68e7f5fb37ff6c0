@testable import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// What ``IndexPublisher`` keeps: views are bounded by count and by bytes, so the memory of
/// the documents grows with the active users but never past the budget, and the public
/// index is never the one forgotten.
@Suite struct IndexPublisherTests {
    @Test func keptDocumentsStayWithinTheirByteBudget() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await TestDatabase.make(.sqlite, in: dir)
        let names = (0..<40).map { "sets/s\($0)" }
        for name in names { try await store.importText(#"{"id":"q","v":1}"#, collection: name) }
        try await store.importText(#"{"id":"AD"}"#, collection: "countries")
        var heads: [String: CollectionHead] = [:]
        for name in names + ["countries"] { heads[name] = try await store.head(of: name) }
        // Room for about three views of twenty entries (~4.5 KB each) and the public index.
        let publisher = IndexPublisher(keys: [], lifetime: 86_400, byteBudget: 16 * 1024)
        let now = Int64(Date().timeIntervalSince1970)
        let publicIndex = try await publisher.current(
            key: [EntryKey(heads["countries"]!)], subject: nil, slot: "", dependencies: nil, store: store.store, now: now)
        var sizes: [Int] = []
        for user in 0..<10 {
            let listed = names[(user * 2)..<(user * 2 + 20)].sorted { $0.utf8Precedes($1) }.map { EntryKey(heads[$0]!) }
            let view = try await publisher.current(key: listed, subject: "u\(user)", slot: "u\(user)", dependencies: nil, store: store.store, now: now)
            #expect(try SignedIndex.parse(Array(view.document.readableBytesView)).entries.count == 20)
            sizes.append(view.size)
        }
        let kept = (0..<10).filter { publisher.kept(for: "u\($0)") != nil }
        #expect(kept.count >= 1 && kept.count < 10, "\(kept)")
        #expect(kept.contains(9), "the newest view is kept")
        #expect(kept.reduce(publicIndex.size) { $0 + sizes[$1] } <= 16 * 1024)
        #expect(publisher.kept(for: "") != nil, "the public index is never forgotten")
        await store.stop()
    }
}
