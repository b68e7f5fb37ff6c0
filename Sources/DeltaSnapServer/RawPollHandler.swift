import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// The first handler of a connection: answers polls from memory — a current token's `304`,
/// an older token's cached delta — straight from the request bytes, before NIO's HTTP decoder, its conversion to
/// swift-http-types and its response encoder — which are most of a 304's cost once the
/// router is out of the way (docs/BENCHMARKS.md, "Speed round").
///
/// Only while the connection has sent nothing else: at the first request that is not a
/// plain poll answered from memory (``PollRequestHead``,
/// ``DeltaSnapAPI/answerFromMemory(collection:ifNoneMatch:acceptEncoding:allowsBody:start:)``)
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
    private let logger: Logger
    private var steppedAside = false
    /// The start of a request whose head has not fully arrived.
    private var partial: ByteBuffer?
    private var needsFlush = false
    private var date = DateHeader()

    init(service: DeltaSnapAPI, logger: Logger) {
        self.service = service
        self.logger = logger
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
                  let answer = service.answerFromMemory(
                      collection: poll.collection, ifNoneMatch: poll.ifNoneMatch, acceptEncoding: poll.acceptEncoding, allowsBody: true, start: start)
            else { return stepAside(context: context, with: buffer) }
            buffer.moveReaderIndex(forwardBy: length)
            let response = switch answer {
            case .notModified(let served): notModified(served, requestID: poll.requestID, allocator: context.channel.allocator)
            case .delta(let headers, let body): delta(headers, body, poll: poll, start: start, allocator: context.channel.allocator)
            }
            context.write(wrapOutboundOut(response), promise: nil)
            needsFlush = true
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

    /// The 304 the router's path would send: the head's validators, `Date`, then the
    /// client's own request id if it sent a safe one.
    /// A cached delta as the router's path sends it (`Date`, then the request id, which a
    /// body answer always carries), logged as the router logs it.
    private func delta(_ headers: HTTPFields, _ body: ByteBuffer, poll: PollRequestHead, start: ContinuousClock.Instant, allocator: ByteBufferAllocator) -> ByteBuffer {
        let requestID = RequestIdentifier.echoed(poll.requestID) ?? RequestID().description
        var out = allocator.buffer(capacity: body.readableBytes + 512)
        out.writeString("HTTP/1.1 200 OK\r\n")
        for field in headers {
            out.writeString(field.name.rawName)
            out.writeString(": ")
            out.writeString(field.value)
            out.writeString("\r\n")
        }
        out.writeString("Date: \(date.now())\r\nX-Request-Id: \(requestID)\r\n\r\n")
        out.writeImmutableBuffer(body)
        RequestLog.write(
            to: logger, requestID: requestID, method: .get, path: "/v1/collections/\(poll.collection)",
            status: .ok, since: start, bytes: body.readableBytes)
        return out
    }

    private func notModified(_ served: ServedHead, requestID: String?, allocator: ByteBufferAllocator) -> ByteBuffer {
        var out = allocator.buffer(capacity: served.encodedNotModifiedHead.count + 96)
        out.writeBytes(served.encodedNotModifiedHead)
        out.writeString("Date: ")
        out.writeString(date.now())
        out.writeString("\r\n")
        if let id = RequestIdentifier.echoed(requestID) {
            out.writeString("X-Request-Id: ")
            out.writeString(id)
            out.writeString("\r\n")
        }
        out.writeString("\r\n")
        return out
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
