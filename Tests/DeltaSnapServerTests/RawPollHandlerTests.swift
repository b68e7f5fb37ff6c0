import DeltaSnapCore
import DeltaSnapSQLiteStore
@testable import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapTestSupport
import Logging
import NIOCore
import NIOEmbedded
import Testing

/// The byte-level handler on an `EmbeddedChannel`: what it answers, in which order, and the
/// exact bytes it hands to NIO's HTTP decoder when it steps aside.
@Suite struct RawPollHandlerTests {
    struct Fixture {
        let api: DeltaSnapAPI
        let current: String
        let previous: String
        let dir: TemporaryDirectory

        func channel() -> EmbeddedChannel {
            var quiet = Logger(label: "raw")
            quiet.logLevel = .warning
            return EmbeddedChannel(handler: RawPollHandler(answers: api.memory, logger: quiet))
        }
    }

    func fixture() async throws -> Fixture {
        let dir = try TemporaryDirectory()
        let store = try SQLiteCollectionStore(path: dir.file("s.sqlite"))
        let first = try await store.importBatch(Array(Fixtures.ndjson(0..<20).utf8), into: "items")
        let second = try await store.importBatch(Array(Fixtures.ndjson(0..<2, revision: 1).utf8), into: "items")
        let api = try await DeltaSnapAPI(store: store)
        let head = try #require(second.head)
        // A cached delta from the first version to the head, as the router would have stored it.
        api.deltas.store(
            PollAnswer(head: head, body: ByteBuffer(string: "DELTA-BODY"), gzip: false),
            for: DeltaCache.Key(head: head, base: try #require(first.token).description, gzip: false))
        return Fixture(api: api, current: head.token.description, previous: try #require(first.token).description, dir: dir)
    }

    func poll(_ token: String, id: String? = nil) -> String {
        "GET /v1/collections/items HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"\(token)\"\r\n" + (id.map { "X-Request-Id: \($0)\r\n" } ?? "") + "\r\n"
    }

    /// Everything written and flushed so far, as text.
    func written(_ channel: EmbeddedChannel) throws -> String {
        var out = ""
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { out += String(buffer: buffer) }
        return out
    }

    @Test func aHeadSplitAcrossReadsIsAnsweredOnceItIsComplete() async throws {
        let f = try await fixture()
        defer { f.dir.remove() }
        let channel = f.channel()
        let request = Array(poll(f.current, id: "split-1").utf8)
        for part in [request[..<5], request[5..<40]] {
            try channel.writeInbound(ByteBuffer(bytes: part))
            #expect(try written(channel).isEmpty)
        }
        try channel.writeInbound(ByteBuffer(bytes: request[40...]))
        let answer = try written(channel)
        #expect(answer.hasPrefix("HTTP/1.1 304 Not Modified\r\n") && answer.hasSuffix("\r\n\r\n"))
        #expect(answer.contains("X-Request-Id: split-1\r\n") && answer.contains("ETag: \"\(f.current)\"\r\n") && answer.contains("Date: "))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)  // nothing reached the decoder
        _ = try channel.finish()
    }

    @Test func pipelinedPollsAreAnsweredInOrderUntilTheFirstRequestItDoesNotAnswer() async throws {
        let f = try await fixture()
        defer { f.dir.remove() }
        let channel = f.channel()
        let other = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        let afterwards = poll(f.current, id: "late")
        try channel.writeInbound(ByteBuffer(string: poll(f.previous, id: "one") + poll(f.current, id: "two") + other + afterwards))
        let answers = try written(channel)
        // The delta first (its head, then Date and the id, then the cached body), then the 304.
        let delta = try #require(answers.range(of: "HTTP/1.1 200 OK\r\n"))
        let notModified = try #require(answers.range(of: "HTTP/1.1 304 Not Modified\r\n"))
        #expect(delta.lowerBound < notModified.lowerBound)
        #expect(answers.contains("Content-Length: 10\r\n") && answers.contains("X-Request-Id: one\r\n\r\nDELTA-BODY"))
        #expect(answers.contains("X-Request-Id: two\r\n") && !answers.contains("late"))
        // The rest goes to the decoder byte for byte, the later poll included; the handler is out of the way.
        let handedOn = try #require(try channel.readInbound(as: ByteBuffer.self))
        #expect(String(buffer: handedOn) == other + afterwards)
        try channel.writeInbound(ByteBuffer(string: poll(f.current)))
        #expect(try written(channel).isEmpty)
        #expect(String(buffer: try #require(try channel.readInbound(as: ByteBuffer.self))) == poll(f.current))
        _ = try channel.finish()
    }

    @Test func aHalfCloseHandsAHeldPartialHeadToTheDecoder() async throws {
        let f = try await fixture()
        defer { f.dir.remove() }
        let channel = f.channel()
        let partial = String(poll(f.current).prefix(30))
        try channel.writeInbound(ByteBuffer(string: partial))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)
        channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(String(buffer: try #require(try channel.readInbound(as: ByteBuffer.self))) == partial)
        #expect(try written(channel).isEmpty)
        _ = try channel.finish()
    }

    @Test func anUnknownTokenAndAnUncachedDeltaAreLeftToTheRouter() async throws {
        let f = try await fixture()
        defer { f.dir.remove() }
        let channel = f.channel()
        let unknown = poll("0000000000000000.1")
        try channel.writeInbound(ByteBuffer(string: unknown))
        #expect(try written(channel).isEmpty)
        #expect(String(buffer: try #require(try channel.readInbound(as: ByteBuffer.self))) == unknown)
        _ = try channel.finish()
    }

    /// A small download is copied into the answer's buffer only while the socket takes what is
    /// written: to a client that pipelines downloads and reads none, the answers go as file
    /// regions (no copy held per answer), whole and in order.
    @Test func aSmallDownloadIsCopiedOnlyWhileTheSocketTakesWrites() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteCollectionStore(path: dir.file("s.sqlite"))
        let bytes = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let hash = AttachmentEndpointTests.sha256(bytes)
        let reference = try AttachmentReference(sha256: hash, size: UInt64(bytes.count), type: "application/octet-stream")
        var given = false
        try await store.storeAttachment(reference) {
            defer { given = true }
            return given ? nil : bytes
        }
        let api = try await DeltaSnapAPI(store: store)
        api.attachmentMemory.remember(reference, in: "files")
        var quiet = Logger(label: "raw")
        quiet.logLevel = .warning
        let channel = EmbeddedChannel(handler: RawPollHandler(answers: api.memory, logger: quiet))
        let download = "GET /v1/collections/files/attachments/\(hash) HTTP/1.1\r\nHost: x\r\n\r\n"

        try channel.writeInbound(ByteBuffer(string: download))
        var copied = 0
        while let part = try channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(let buffer) = part else { Issue.record("a file region while writable"); continue }
            copied += buffer.readableBytes
        }
        #expect(copied > bytes.count, "the head and the body in one buffer")

        channel.isWritable = false
        try channel.writeInbound(ByteBuffer(string: download + download))
        var regions = 0
        var heads = 0
        while let part = try channel.readOutbound(as: IOData.self) {
            switch part {
            case .fileRegion(let region):
                #expect(region.readableBytes == bytes.count)
                regions += 1
            case .byteBuffer(let buffer):
                #expect(buffer.readableBytes < 1_000, "a copied body while the socket takes nothing")
                heads += 1
            }
        }
        #expect(regions == 2 && heads == 2)
        _ = try? channel.finish()
    }
}
