import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// The first handler of a connection: answers polls from memory — a current token's `304`,
/// an older token's cached delta, an unchanged index or view's `304` — straight from the
/// request bytes, before NIO's HTTP decoder, its conversion to swift-http-types and its
/// response encoder — which are most of a 304's cost once the router is out of the way
/// (docs/BENCHMARKS.md, "Speed round").
///
/// Only while the connection has sent nothing else: at the first request that is not a
/// plain poll answered from memory (``PollRequestHead``,
/// ``MemoryAnswers/answerFromMemory(collection:ifNoneMatch:acceptEncoding:allowsBody:start:)``,
/// ``IndexController/indexNotModifiedFromMemory(authorization:ifNoneMatch:)``)
/// the handler hands that request's bytes, and every later byte, to the decoder and steps
/// aside for good. Responses therefore never overtake each other, and whatever it does not
/// answer reaches the rest of the server exactly as sent.
final class RawPollHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Bodies up to this size are read into the response's buffer rather than sent by
    /// `sendfile`: at 20 and 32 KiB the copy cost 10 % and 5 % less CPU a download than the
    /// cork's two `setsockopt`s and `sendfile`, at 60 KiB 12 % more (docs/BENCHMARKS.md).
    static let copiedBodyBytes = 32 * 1024

    #if os(Linux)
    /// `TCP_CORK`: partial frames wait until uncorked.
    static let cork: ChannelOptions.Types.SocketOption? = ChannelOptions.tcpOption(NIOBSDSocket.Option(rawValue: 3))
    #else
    static let cork: ChannelOptions.Types.SocketOption? = nil
    #endif

    /// A longer head is not a poll: hand it on rather than hold it.
    static let maximumHeadBytes = 4096

    private let answers: MemoryAnswers
    private var writer: PollResponseWriter
    private var steppedAside = false
    /// The start of a request whose head has not fully arrived.
    private var partial: ByteBuffer?
    private var needsFlush = false
    /// The connection's guard, told of the requests answered here (nil in tests without one).
    private let connectionGuard: ConnectionGuardHandler?

    init(answers: MemoryAnswers, logger: Logger, connectionGuard: ConnectionGuardHandler? = nil) {
        self.answers = answers
        self.connectionGuard = connectionGuard
        writer = PollResponseWriter(answers: answers, logger: logger)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if steppedAside { return context.fireChannelRead(data) }
        var buffer = unwrapInboundIn(data)
        if var held = partial {
            held.writeBuffer(&buffer)
            buffer = held
            partial = nil
        }
        var answered = false
        // The connection's guard times requests by what it is told: these never reach the
        // decoder, so the handlers that tell it of the others never see them.
        defer {
            if answered { connectionGuard?.record(.answeredBeforeDecoder(partialHead: partial != nil)) }
        }
        while buffer.readableBytes > 0 {
            let start = ContinuousClock.now
            guard let length = buffer.withUnsafeReadableBytes(Self.headLength) else {
                if buffer.readableBytes > Self.maximumHeadBytes { return stepAside(context: context, with: buffer) }
                partial = buffer
                return
            }
            guard length <= Self.maximumHeadBytes,
                  let poll = buffer.withUnsafeReadableBytes({ PollRequestHead.parse($0[..<length]) }),
                  let answer = answer(to: poll, start: start)
            else { return stepAside(context: context, with: buffer) }
            buffer.moveReaderIndex(forwardBy: length)
            write(answer, to: poll, start: start, context: context)
            needsFlush = true
            answered = true
        }
    }

    /// What this handler answers.
    fileprivate enum Answer {
        case collection(FastAnswer)
        /// The index's or a view's `304`: its head and `ETag`.
        case indexNotModified(IndexHeaders, etag: String)
        /// A download: its status, header fields and body (bytes, or a range of an open file).
        case attachment(HTTPResponse.Status, HTTPFields, ByteBuffer?)
        case attachmentFile(HTTPResponse.Status, HTTPFields, BlobFile, Range<UInt64>)
        /// A public `200` of the whole blob: its head encoded once, and its file.
        case plainFile(ByteBuffer, BlobFile, size: UInt64)
    }

    private func answer(to poll: PollRequestHead, start: ContinuousClock.Instant) -> Answer? {
        switch poll.target {
        case .collection(let name):
            answers.answerFromMemory(
                collection: name, ifNoneMatch: poll.ifNoneMatch, acceptEncoding: poll.acceptEncoding, allowsBody: true, start: start
            ).map(Answer.collection)
        case .index:
            answers.index.indexNotModifiedFromMemory(authorization: poll.authorization, ifNoneMatch: poll.ifNoneMatch).map {
                Answer.indexNotModified($0.head, etag: $0.etag)
            }
        case .attachment(let name, let sha256):
            downloadAnswer(collection: name, sha256: sha256, ifNoneMatch: poll.ifNoneMatch)
        }
    }

    /// A download, its body sent by `sendfile` from the store's file as nginx sends a static
    /// file (NIO's `FileRegion`, written here below every handler that would need bytes).
    private func downloadAnswer(collection name: String, sha256: String, ifNoneMatch: String) -> Answer? {
        if ifNoneMatch.isEmpty, let plain = answers.plainDownload(collection: name, sha256: sha256) {
            return .plainFile(plain.head, plain.file, size: plain.size)
        }
        guard let answer = answers.attachmentFromMemory(
            collection: name, sha256: sha256, ifNoneMatch: ifNoneMatch.isEmpty ? nil : ifNoneMatch, range: nil, ifRange: nil, sendsBody: true,
            allowsFile: true)
        else { return nil }
        return switch answer.body {
        case .none: .attachment(answer.status, answer.headers, nil)
        case .bytes(let bytes): .attachment(answer.status, answer.headers, bytes)
        case .file(let file, let range): .attachmentFile(answer.status, answer.headers, file, range)
        }
    }

    /// The length of the request head at the start of `bytes` (through its empty line), or
    /// nil when it has not fully arrived. A plain loop: Foundation's generic `firstRange`
    /// was a fifth of a 304's cost.
    private static func headLength(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard bytes.count >= 4 else { return nil }
        var index = 3
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "\n") {
                if bytes[index - 1] == UInt8(ascii: "\r") && bytes[index - 2] == UInt8(ascii: "\n") && bytes[index - 3] == UInt8(ascii: "\r") {
                    return index + 1
                }
            }
            index += 1
        }
        return nil
    }

    /// Writes `answer` as the router's path sends it: the head encoded once per version, per
    /// cached delta or per server (an index's, with its `ETag` written here), then `Date` and the
    /// request id (``PollResponseWriter``), then the cached body as its own buffer (shared, not
    /// copied).
    private func write(_ answer: Answer, to poll: PollRequestHead, start: ContinuousClock.Instant, context: ChannelHandlerContext) {
        var tail = context.channel.allocator.buffer(capacity: 320)
        let status: HTTPResponse.Status
        switch answer {
        case .collection(.notModified(let served)):
            status = .notModified
            tail.writeImmutableBuffer(served.encodedNotModifiedHead)
        case .indexNotModified(let head, let etag):
            status = .notModified
            tail.writeImmutableBuffer(head.encodedNotModifiedHead)
            tail.writeString("ETag: ")
            tail.writeString(etag)
            tail.writeString("\r\n")
        case .collection(.delta):
            status = .ok
        case .plainFile(let head, _, _):
            status = .ok
            tail.writeImmutableBuffer(head)
        case .attachment(let answered, let fields, _), .attachmentFile(let answered, let fields, _, _):
            // As NIO's encoder writes the same fields: the status line, then each in order.
            status = answered
            tail.writeString("HTTP/1.1 \(answered.code) \(answered.reasonPhrase)\r\n")
            for field in fields {
                tail.writeString(field.name.rawName)
                tail.writeString(": ")
                tail.writeString(field.value)
                tail.writeString("\r\n")
            }
        }
        let identity = writer.stamp(&tail, status: status, clientsID: poll.requestID)
        var bodyBytes: Int?
        if case .collection(.delta(let cached)) = answer {
            context.write(wrapOutboundOut(cached.encodedHead), promise: nil)
            context.write(wrapOutboundOut(tail), promise: nil)
            context.write(wrapOutboundOut(cached.body), promise: nil)
            bodyBytes = cached.body.readableBytes
        } else if case .attachment(_, _, var body?) = answer {
            // One buffer, one send: the head and a small body leave in the same segments.
            bodyBytes = body.readableBytes
            tail.writeBuffer(&body)
            context.write(wrapOutboundOut(tail), promise: nil)
        } else if let (file, range) = answer.file, range.count <= Self.copiedBodyBytes, context.channel.isWritable,
                  file.read(range, appendingTo: &tail) {
            // A small body is read into the head's buffer and leaves with it in one `write`:
            // two system calls, where `sendfile` under the cork takes four. Only while the
            // socket takes what is written: a client that pipelines downloads and reads none
            // gets file regions, which hold no copy, once the first answers are queued.
            bodyBytes = range.count
            context.write(wrapOutboundOut(tail), promise: nil)
        } else if let (file, range) = answer.file {
            // Corked while the head and the file go out, as nginx's `tcp_nopush`: the head
            // leaves in the file's first segment, not in one of its own (which cost the
            // client a wakeup per download).
            let options = context.channel.syncOptions
            if let cork = Self.cork { try? options?.setOption(cork, value: 1) }
            context.write(wrapOutboundOut(tail), promise: nil)
            let handle = file.lend()
            let sent = context.eventLoop.makePromise(of: Void.self)
            sent.futureResult.whenComplete { _ in
                if let cork = Self.cork { try? options?.setOption(cork, value: 0) }
                file.giveBack(handle)
            }
            let region = FileRegion(fileHandle: handle, readerIndex: Int(range.lowerBound), endIndex: Int(range.upperBound))
            context.write(NIOAny(IOData.fileRegion(region)), promise: sent)
            bodyBytes = range.count
        } else {
            context.write(wrapOutboundOut(tail), promise: nil)
        }
        let route: PollResponseWriter.Route = switch answer {
        case .indexNotModified: .index
        case .attachment, .attachmentFile, .plainFile: .attachment
        case .collection: .collection
        }
        writer.finished(identity, route: route, method: .get, path: poll.path, status: status, since: start, bodyBytes: bodyBytes)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        // Until it steps aside, this handler read every byte itself: nothing behind it (the
        // HTTP decoder, Hummingbird's stream) has had a read this round to complete, and the
        // walk through them was a percent of a small download's CPU.
        if steppedAside { context.fireChannelReadComplete() }
    }

    /// The end of input, or of the connection, reaches the decoder after any bytes held.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if !steppedAside, let partial { stepAside(context: context, with: partial) }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !steppedAside, let partial { stepAside(context: context, with: partial) }
        context.fireChannelInactive()
    }

    private func stepAside(context: ChannelHandlerContext, with buffer: ByteBuffer) {
        steppedAside = true
        partial = nil
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelRead(wrapInboundOut(buffer))
    }
}

extension RawPollHandler.Answer {
    /// The open file and the range of it a download's body is, if it is one.
    fileprivate var file: (BlobFile, Range<UInt64>)? {
        switch self {
        case .attachmentFile(_, _, let file, let range): (file, range)
        case .plainFile(_, let file, let size): (file, 0..<size)
        default: nil
        }
    }
}
