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
/// ``DeltaSnapAPI/answerFromMemory(collection:ifNoneMatch:acceptEncoding:allowsBody:start:)``,
/// ``DeltaSnapAPI/indexNotModifiedFromMemory(authorization:ifNoneMatch:)``)
/// the handler hands that request's bytes, and every later byte, to the decoder and steps
/// aside for good. Responses therefore never overtake each other, and whatever it does not
/// answer reaches the rest of the server exactly as sent.
final class RawPollHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// A longer head is not a poll: hand it on rather than hold it.
    static let maximumHeadBytes = 4096

    private let service: DeltaSnapAPI
    private let requestLog: RequestLog
    /// Read once: the configuration is a large value, and this is read per answer.
    private let logNotModified: Bool
    private var steppedAside = false
    /// The start of a request whose head has not fully arrived.
    private var partial: ByteBuffer?
    private var needsFlush = false
    private var date = DateHeader()

    init(service: DeltaSnapAPI, logger: Logger) {
        self.service = service
        requestLog = RequestLog(logger: logger, output: service.configuration.requestLogOutput)
        logNotModified = service.configuration.logNotModified
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if steppedAside { return context.fireChannelRead(data) }
        var buffer = unwrapInboundIn(data)
        if var held = partial {
            held.writeBuffer(&buffer)
            buffer = held
            partial = nil
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
        }
    }

    /// What this handler answers.
    private enum Answer {
        case collection(FastAnswer)
        /// The index's or a view's `304`: its head and `ETag`.
        case indexNotModified(IndexHeaders, etag: String)
    }

    private func answer(to poll: PollRequestHead, start: ContinuousClock.Instant) -> Answer? {
        switch poll.target {
        case .collection(let name):
            service.answerFromMemory(
                collection: name, ifNoneMatch: poll.ifNoneMatch, acceptEncoding: poll.acceptEncoding, allowsBody: true, start: start
            ).map(Answer.collection)
        case .index:
            service.indexNotModifiedFromMemory(authorization: poll.authorization, ifNoneMatch: poll.ifNoneMatch).map {
                Answer.indexNotModified($0.head, etag: $0.etag)
            }
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
    /// request id (``ResponseIdentity``), then the cached body as its own buffer (shared, not
    /// copied).
    private func write(_ answer: Answer, to poll: PollRequestHead, start: ContinuousClock.Instant, context: ChannelHandlerContext) {
        let status: HTTPResponse.Status
        switch answer {
        case .collection(.notModified), .indexNotModified: status = .notModified
        case .collection(.delta): status = .ok
        }
        let identity = ResponseIdentity(
            status: status, clientsID: poll.requestID, logNotModified: logNotModified, newID: { RequestID().description })
        var tail = context.channel.allocator.buffer(capacity: 320)
        switch answer {
        case .collection(.notModified(let served)):
            tail.writeImmutableBuffer(served.encodedNotModifiedHead)
        case .indexNotModified(let head, let etag):
            tail.writeImmutableBuffer(head.encodedNotModifiedHead)
            tail.writeString("ETag: ")
            tail.writeString(etag)
            tail.writeString("\r\n")
        case .collection(.delta):
            break
        }
        tail.writeString("Date: ")
        tail.writeString(date.now())
        tail.writeString("\r\n")
        if let requestID = identity.requestID {
            tail.writeString("X-Request-Id: ")
            tail.writeString(requestID)
            tail.writeString("\r\n")
        }
        tail.writeString("\r\n")
        var bodyBytes: Int?
        switch answer {
        case .collection(.delta(let cached)):
            context.write(wrapOutboundOut(cached.encodedHead), promise: nil)
            context.write(wrapOutboundOut(tail), promise: nil)
            context.write(wrapOutboundOut(cached.body), promise: nil)
            bodyBytes = cached.body.readableBytes
        case .collection(.notModified):
            context.write(wrapOutboundOut(tail), promise: nil)
        case .indexNotModified:
            context.write(wrapOutboundOut(tail), promise: nil)
            // Counted as the router and the fast path count an index's answers.
            service.metrics.countResponse(route: "/v1/index", status: status.code)
        }
        if identity.logged, let requestID = identity.requestID {
            requestLog.write(requestID: requestID, method: .get, path: poll.path, status: status, since: start, bytes: bodyBytes)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
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
