import DeltaSnapCore
@testable import DeltaSnapSQLiteStore
@testable import DeltaSnapServer
@testable import DeltaSnapStore
import DeltaSnapTestSupport
import Testing

/// A connection goes back to the pool only when nothing of its previous user can touch it
/// again: a statement finalised later, on another thread, raced the next request using the
/// connection (opened without SQLite's mutex) and crashed the server.
@Suite struct BodyStreamerTests {
    @Test(arguments: [false, true])
    func aFinishedBodyReturnsItsConnectionWithNoLiveStatement(_ delta: Bool) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        let store = try SQLiteDatabase(path: db)
        try Fixtures.importText(Fixtures.ndjson(0..<500), into: store, collection: "items")
        try Fixtures.importText(Fixtures.ndjson(0..<5, revision: 1), into: store, collection: "items")
        let pool = SQLiteReadPool(path: db)
        let source = try await SQLiteRecordSource.open(pool: pool, on: BlockingQueue(label: "test"), collection: "items", selecting: delta ? .changes(after: 1) : .visible)
        let streamer = try BodyStreamer(source: source, base: delta ? "x" : nil, gzipLevel: 1)
        let bytes = try await streamer.readAll()
        // The streamer is still alive (as it is until the response is released)…
        #expect(streamer.header.count == (delta ? 5 : 500))
        // …yet its connection is back in the pool, clean.
        let idle = pool.idleStores
        #expect(idle.count == 1)
        #expect(idle.allSatisfy { $0.liveStatementCount == 0 })
        #expect(try !GzipDecompressor.decompress(Array(bytes.readableBytesView)).isEmpty)
    }

    @Test func aStreamerDroppedMidwayReturnsItsConnectionClean() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = dir.file("s.sqlite")
        try Fixtures.importText(Fixtures.ndjson(0..<2000), into: try SQLiteDatabase(path: db), collection: "items")
        let pool = SQLiteReadPool(path: db)
        do {
            let source = try await SQLiteRecordSource.open(pool: pool, on: BlockingQueue(label: "test"), collection: "items", selecting: .visible)
            let streamer = try BodyStreamer(source: source, base: nil, gzipLevel: nil)
            _ = try await streamer.nextChunk()  // a client that went away after the first chunk
            #expect(pool.idleStores.isEmpty)
        }
        // Released when the streamer is: ARC decides the moment (the async frame may hold it
        // a little past the block, longer on a loaded machine), so wait for it, bounded.
        for _ in 0..<100 where pool.idleStores.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
        #expect(pool.idleStores.count == 1)
        #expect(pool.idleStores.allSatisfy { $0.liveStatementCount == 0 })
    }
}
