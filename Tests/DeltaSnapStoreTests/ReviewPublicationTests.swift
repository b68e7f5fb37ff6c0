import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

/// `CollectionStore.publish` on each backend — PostgreSQL copies an approval inside the
/// database, SQLite writes it with `importPartitions` — leaves the same state: the published
/// records, their count, checksum and digest as a plain import of them would, one delta of
/// exactly the changes, and the kept values a rollback restores from.
@Suite struct ReviewPublicationTests {
    @Test(arguments: TestBackend.allCases)
    func anApprovalPublishesExactlyItsChangesWithTheStateAnImportWouldHave(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let database = try await TestDatabase.make(backend, in: dir)
        defer { Task { await database.stop() } }
        let store = database.store
        // Published: a, b, c visible; d hidden (a tombstone row).
        try await database.importText(#"{"id":"a","v":1}{"id":"b","v":1}{"id":"c","v":1}{"id":"d","v":1}"#, collection: "cat")
        try await database.importText(#"{"id":"d","hidden":true}"#, collection: "cat")
        // Proposed (the frozen request): a changed, b removed, c as is, d back, é new.
        let request = ReviewPaths.request(of: "cat")
        try await database.importText(#"{"id":"a","v":2}{"id":"c","v":1}{"id":"d","v":4}{"id":"é","v":5}"#, collection: request)
        let published = try #require(try await store.head(of: "cat"))
        let source = try #require(try await store.head(of: request))

        var changes: [RecordChange] = []
        for id in ["a", "b", "c", "d", "é"] {
            if let change = RecordChange(before: try await store.record(id, in: "cat"), after: try await store.record(id, in: request)) {
                changes.append(change)
            }
        }
        #expect(changes.map(\.kind) == [.changed, .removed, .added, .added])
        let log = PartitionRecords(path: ReviewPaths.log(of: "cat"), records: [try Record(json: Array(#"{"id":"1","step":"approve"}"#.utf8))])
        func publication(expecting version: UInt64?) -> ReviewPublication {
            ReviewPublication(
                path: "cat", expectedVersion: version, changes: changes, source: (request, source.version),
                replaced: ReviewPaths.replaced(of: "cat", publication: 1), added: ReviewPaths.added(of: "cat", publication: 1), alongside: [log])
        }

        // Read against another version: refused, nothing written.
        await #expect(throws: StoreError.self) { try await store.publish(publication(expecting: published.version - 1)) }
        #expect(try await store.head(of: "cat")?.version == published.version)
        #expect(try await store.head(of: ReviewPaths.replaced(of: "cat", publication: 1)) == nil)

        let results = try await store.publish(publication(expecting: published.version))
        let result = try #require(results.first { $0.collection == "cat" })
        #expect(result.head?.version == published.version + 1 && result.upserted == 3 && result.hidden == 1)
        #expect(try await database.changes(after: published.version, in: "cat").sorted() == [
            #"{"hidden":true,"id":"b"}"#, #"{"id":"a","v":2}"#, #"{"id":"d","v":4}"#, #"{"id":"é","v":5}"#,
        ])
        #expect(try await database.export("cat") == "{\"id\":\"a\",\"v\":2}\n{\"id\":\"c\",\"v\":1}\n{\"id\":\"d\",\"v\":4}\n{\"id\":\"é\",\"v\":5}\n")
        // What a rollback restores from: the values replaced, and the ids that were new.
        #expect(try await database.export(ReviewPaths.replaced(of: "cat", publication: 1)) == "{\"id\":\"a\",\"v\":1}\n{\"id\":\"b\",\"v\":1}\n")
        #expect(try await database.export(ReviewPaths.added(of: "cat", publication: 1)) == "{\"id\":\"d\",\"v\":4}\n{\"id\":\"é\",\"v\":5}\n")
        #expect(try await database.export(ReviewPaths.log(of: "cat")) == "{\"id\":\"1\",\"step\":\"approve\"}\n")

        // The state is the one a plain import of the published records has, digest included.
        let other = try TemporaryDirectory()
        defer { other.remove() }
        let reference = try await TestDatabase.make(backend, in: other)
        defer { Task { await reference.stop() } }
        try await reference.importText(try await database.export("cat"), collection: "cat")
        let (made, expected) = (try await store.publishedState(of: ["cat"]), try await reference.store.publishedState(of: ["cat"]))
        #expect(made.entries.map(\.digest) == expected.entries.map(\.digest))
        #expect(result.head?.checksum == (try await reference.head(of: "cat"))?.checksum)
        #expect(result.head?.count == 4)
    }

    /// With a pinned epoch (`DELTASNAP_EPOCH`, reproducible builds) a workspace still gets
    /// tokens of its own: its epoch is derived from the pinned one and its path, the same on
    /// every build, never the published collection's.
    @Test(arguments: TestBackend.allCases)
    func aWorkspaceNeverSharesThePinnedEpoch(_ backend: TestBackend) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let configuration = StoreConfiguration(epochForNewCollections: "00000000000000a1")
        let database = try await TestDatabase.make(backend, in: dir, configuration: configuration)
        defer { Task { await database.stop() } }
        try await database.importText(#"{"id":"a","v":1}"#, collection: "cat")
        let workspace = try await database.store.prepareWorkspace(of: "cat")
        let (published, copy) = (try await database.head(of: "cat"), try await database.head(of: workspace))
        #expect(published?.epoch == "00000000000000a1")
        #expect(copy?.epoch == configuration.epoch(forNew: workspace) && copy?.epoch != published?.epoch)
        #expect(ServerToken.isEpoch(try #require(copy?.epoch)))
        #expect(configuration.epoch(forNew: ReviewPaths.log(of: "cat")) == "00000000000000a1", "bookkeeping is never served")
    }

}
