import DeltaSnapCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import ServiceLifecycle

/// An HTTP server on 127.0.0.1 whose answers a test scripts: broken bodies, odd validators,
/// errors, stalls. It records every request it receives.
package final class ScriptedServer: Sendable {
    package struct Received: Sendable {
        /// Header fields by lowercased name (several lines of one field joined with ", ").
        package var headers: [String: String]
    }

    package struct Reply: Sendable {
        package var status: Int
        package var headers: [String: String]
        package var body: [UInt8]
        /// Wait this long before answering (to outlast a client's timeout).
        package var delay: Duration?

        package init(status: Int = 200, headers: [String: String] = [:], body: [UInt8] = [], delay: Duration? = nil) {
            self.status = status
            self.headers = headers
            self.body = body
            self.delay = delay
        }
    }

    package let port: Int
    private let services: ServiceGroup
    private let task: Task<Void, any Error>
    private let log: Locked<[Received]>

    package var url: URL { URL(string: "http://127.0.0.1:\(port)/v1/collections/items")! }
    package var received: [Received] { log.current }

    package static func start(_ script: @escaping @Sendable (Received, Int) -> Reply) async throws -> ScriptedServer {
        let log = Locked<[Received]>([])
        let router = Router()
        router.get("/v1/collections/:name") { request, _ -> Response in
            var headers: [String: String] = [:]
            for field in request.headers {
                let name = field.name.canonicalName.lowercased()
                headers[name] = headers[name].map { $0 + ", " + field.value } ?? field.value
            }
            let received = Received(headers: headers)
            let index = log.withLock { list in
                list.append(received)
                return list.count - 1
            }
            let reply = script(received, index)
            if let delay = reply.delay { try? await Task.sleep(for: delay) }
            var fields = HTTPFields()
            for (name, value) in reply.headers { fields[HTTPField.Name(name)!] = value }
            return Response(status: .init(code: reply.status), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: reply.body)))
        }
        var logger = Logger(label: "scripted")
        logger.logLevel = .critical
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                continuation.yield(channel.localAddress?.port ?? 0)
                continuation.finish()
            }, logger: logger)
        // Stopped through a graceful shutdown, never by cancelling `run()`: a connection
        // accepted at the instant of a cancellation is dropped with its NIOAsyncChannel
        // unclosed, which traps the whole test process ("Deinited NIOAsyncWriter without
        // calling finish()", swift-nio#2637).
        let services = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let task = Task { try await services.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            await services.triggerGracefulShutdown()
            throw RawHTTPClient.Failure(description: "the scripted server did not start")
        }
        return ScriptedServer(port: port, services: services, task: task, log: log)
    }

    private init(port: Int, services: ServiceGroup, task: Task<Void, any Error>, log: Locked<[Received]>) {
        self.port = port
        self.services = services
        self.task = task
        self.log = log
    }

    /// Stops the server gracefully (open connections are closed once idle) and waits for it;
    /// after 2 s a connection a client still holds busy is cut.
    package func stop() async {
        await services.triggerGracefulShutdown()
        let task = self.task
        let deadline = Task {
            try await Task.sleep(for: .seconds(2))
            task.cancel()
        }
        _ = await task.result
        deadline.cancel()
    }

    deinit {
        // A test that returned early without `stop()`: never leave the server running.
        let services = self.services
        Task { await services.triggerGracefulShutdown() }
    }
}

/// Bodies in the wire format, for scripted answers.
package enum Bodies {
    /// A body holding `records` (a full one replaces; a delta applies on `base`), with the
    /// checksum of `visibleState` (the whole state it leads to) unless `checksum` is given.
    package static func make(
        kind: BodyKind, collection: String = "items", base: String? = nil, token: String,
        records: [Record], visibleState: [Record], checksum: StateChecksum? = nil, gzip: Bool = true
    ) -> [UInt8] {
        var state = StateChecksum.empty
        for record in visibleState where !record.isHidden { state.add(record) }
        var encoder = BodyEncoder(header: BodyHeader(
            collection: collection, kind: kind, base: base, token: token,
            lastModified: "Sun, 22 Nov 2026 12:00:00 GMT", checksum: checksum ?? state, count: records.count))
        var out = encoder.start()
        for record in records { encoder.append(record, into: &out) }
        encoder.finish(into: &out)
        return gzip ? GzipCompressor.compress(out) : out
    }
}
