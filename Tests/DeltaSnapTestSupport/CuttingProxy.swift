import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP proxy on 127.0.0.1 that streams bytes both ways and cuts every connection open at
/// the moment the client→server traffic, counted over all connections, passes another
/// `cutEvery` bytes — a mobile network that drops every few megabytes. It counts what it
/// forwarded upstream, and can slow the upstream direction to `bytesPerSecond` (so a test
/// can kill a client mid-upload). Connections are one thread pair each; `stop()` ends them.
///
/// ```swift
/// let proxy = try CuttingProxy(upstreamPort: server.port, cutEvery: 4 << 20)
/// defer { proxy.stop() }
/// proxy.bytesUpstream   // what the clients sent through it
/// ```
package final class CuttingProxy: @unchecked Sendable {
    package let port: Int
    private let upstreamPort: Int
    private let cutEvery: Int?
    private let cutDownstreamEvery: Int?
    private let bytesPerSecond: Int?
    private let listener: Int32
    private let lock = NSLock()
    private var forwarded = 0
    private var returned = 0
    private var ranges = 0
    private var cuts = 0
    private var open: [ProxiedConnection] = []
    private var stopped = false

    /// `cutDownstreamEvery`: cut every open connection each time the server→client traffic,
    /// counted over all connections, passes another that many bytes (a download's network).
    package init(upstreamPort: Int, cutEvery: Int? = nil, cutDownstreamEvery: Int? = nil, bytesPerSecond: Int? = nil) throws {
        self.upstreamPort = upstreamPort
        self.cutEvery = cutEvery
        self.cutDownstreamEvery = cutDownstreamEvery
        self.bytesPerSecond = bytesPerSecond
        (listener, port) = try LoopbackSocket.listen()
        LoopbackSocket.acceptEach(on: listener, isStopped: { [self] in lock.withLock { stopped } }) { [self] client in connect(client) }
    }

    /// Bytes forwarded from clients to the server so far.
    package var bytesUpstream: Int { lock.withLock { forwarded } }
    /// Bytes forwarded from the server to clients so far.
    package var bytesDownstream: Int { lock.withLock { returned } }
    /// Requests forwarded with a `Range: bytes=` header field (a resumed download), as seen in
    /// the client→server bytes.
    package var rangeRequests: Int { lock.withLock { ranges } }
    /// Connections cut so far.
    package var cutCount: Int { lock.withLock { cuts } }

    package func stop() {
        let connections = lock.withLock {
            stopped = true
            return open
        }
        // The accepting thread closes the listener as it leaves (LoopbackSocket.acceptEach).
        shutdown(listener, Int32(SHUT_RDWR))
        for connection in connections { connection.cut() }
    }

    /// Pairs an accepted client with a connection upstream, one pump each way.
    private func connect(_ client: Int32) {
        guard let upstream = try? LoopbackSocket.connect(to: upstreamPort) else {
            close(client)
            return
        }
        let connection = ProxiedConnection(client: client, upstream: upstream)
        lock.withLock { open.append(connection) }
        Thread { [self] in pump(connection, upstream: true) }.start()
        pump(connection, upstream: false)
    }

    private func pump(_ connection: ProxiedConnection, upstream: Bool) {
        let (source, destination) = upstream ? (connection.client, connection.upstream) : (connection.upstream, connection.client)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            var chunk = count
            if upstream {
                // A request head starts a read on loopback: its first bytes are enough to count
                // resumed downloads, without scanning (and slowing) every byte of an upload.
                let found = Self.rangeFields(in: buffer, count: min(count, 8192))
                if found > 0 { lock.withLock { ranges += found } }
            }
            let every = upstream ? cutEvery : cutDownstreamEvery
            if let every {
                // Forward only up to the next cut, then cut every open connection.
                let (allowed, cutNow) = lock.withLock { () -> (Int, Bool) in
                    let moved = upstream ? forwarded : returned
                    let next = (moved / every + 1) * every
                    return moved + count >= next ? (next - moved, true) : (count, false)
                }
                chunk = allowed
                if !writeAll(buffer, count: chunk, to: destination) { break }
                lock.withLock { if upstream { forwarded += chunk } else { returned += chunk } }
                if cutNow {
                    cutAll()
                    break
                }
            } else {
                if !writeAll(buffer, count: chunk, to: destination) { break }
                lock.withLock { if upstream { forwarded += chunk } else { returned += chunk } }
            }
            if upstream, let bytesPerSecond { usleep(useconds_t(Double(chunk) / Double(bytesPerSecond) * 1_000_000)) }
        }
        connection.cut()
        if connection.pumpEnded() { lock.withLock { open.removeAll { $0 === connection } } }
    }

    private static let rangeField = Array("\r\nrange: bytes=".utf8)

    /// How many `Range: bytes=` header fields (any case) the first `count` bytes hold.
    private static func rangeFields(in buffer: [UInt8], count: Int) -> Int {
        let field = rangeField
        guard count >= field.count else { return 0 }
        var found = 0
        for start in 0...(count - field.count) where buffer[start] == 13 {
            var index = 0
            while index < field.count, buffer[start + index] | (buffer[start + index] >= 65 && buffer[start + index] <= 90 ? 0x20 : 0) == field[index] { index += 1 }
            if index == field.count { found += 1 }
        }
        return found
    }

    private func cutAll() {
        let connections = lock.withLock {
            cuts += 1
            return open
        }
        for connection in connections { connection.cut() }
    }

    private func writeAll(_ buffer: [UInt8], count: Int, to socket: Int32) -> Bool {
        var sent = 0
        while sent < count {
            let written = buffer[sent..<count].withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
            guard written > 0 else { return false }
            sent += written
        }
        return true
    }
}

/// One proxied connection and its two pumps. Both descriptors stay open until both pumps
/// have ended, and every cut happens under the lock: a `shutdown` on a descriptor already
/// closed lands on whatever the process opened next under that number — it cut other
/// tests' connections, whose clients saw "empty reply from server".
private final class ProxiedConnection: @unchecked Sendable {
    let client: Int32
    let upstream: Int32
    private let lock = NSLock()
    private var pumpsEnded = 0

    init(client: Int32, upstream: Int32) {
        self.client = client
        self.upstream = upstream
    }

    /// Ends both directions (each pump's read returns), unless both have ended already.
    func cut() {
        lock.withLock {
            guard pumpsEnded < 2 else { return }
            shutdown(client, Int32(SHUT_RDWR))
            shutdown(upstream, Int32(SHUT_RDWR))
        }
    }

    /// One pump ended; the second closes both descriptors. True for the second.
    func pumpEnded() -> Bool {
        lock.withLock {
            pumpsEnded += 1
            guard pumpsEnded == 2 else { return false }
            close(client)
            close(upstream)
            return true
        }
    }
}
