import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A chaos proxy on 127.0.0.1 in front of a real server. For each request a script picks a
/// fault: forward it; forward it and lose the response (the request took effect upstream,
/// the client never hears — a flaky mobile network); answer it with a status of its own
/// without forwarding (a 503, a 404); or hold it for a while first.
///
/// ```swift
/// let proxy = try FaultProxy(upstreamPort: server.port) { index, _, _ in index % 2 == 1 ? .dropResponse : .forward }
/// defer { proxy.stop() }
/// ```
package final class FaultProxy: @unchecked Sendable {
    package enum Fault: Sendable {
        case forward
        case dropResponse
        case respond(status: Int, body: String)
        /// Like ``respond(status:body:)`` with extra header fields (e.g. `Retry-After`).
        case respondWith(status: Int, headers: [String: String], body: String)
        case delay(seconds: Double)
    }

    package let port: Int
    private let listener: Int32
    private let upstreamPort: Int
    private let script: @Sendable (Int, String, String) -> Fault
    private let lock = NSLock()
    private var requestCount = 0
    private var droppedCount = 0
    private var stopped = false

    /// Requests forwarded, and responses dropped, so far.
    package var counts: (forwarded: Int, dropped: Int) { lock.withLock { (requestCount, droppedCount) } }

    package init(upstreamPort: Int, script: @escaping @Sendable (_ index: Int, _ method: String, _ path: String) -> Fault) throws {
        self.upstreamPort = upstreamPort
        self.script = script
        (listener, port) = try LoopbackSocket.listen()
        LoopbackSocket.acceptEach(on: listener, isStopped: { [self] in lock.withLock { stopped } }) { [self] client in serve(client) }
    }

    /// Stops accepting; connections in flight finish on their own.
    package func stop() {
        lock.withLock { stopped = true }
        // The accepting thread closes the listener as it leaves (LoopbackSocket.acceptEach).
        shutdown(listener, Int32(SHUT_RDWR))
    }

    /// One request per connection: read it, then do what the script says.
    private func serve(_ client: Int32) {
        defer { close(client) }
        guard let (method, path, headers, body) = readRequest(client) else { return }
        let index = lock.withLock { () -> Int in
            defer { requestCount += 1 }
            return requestCount
        }
        let fault = script(index, method, path)
        let response: RawHTTPClient.Response
        switch fault {
        case .respond(let status, let text):
            response = RawHTTPClient.Response(status: status, headers: [("Content-Type", "application/json")], body: Array(text.utf8))
        case .respondWith(let status, let extra, let text):
            response = RawHTTPClient.Response(
                status: status, headers: [("Content-Type", "application/json")] + extra.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
                body: Array(text.utf8))
        case .forward, .dropResponse, .delay:
            if case .delay(let seconds) = fault { Thread.sleep(forTimeInterval: seconds) }
            guard let upstream = try? RawHTTPClient(port: upstreamPort),
                  let answer = try? upstream.request(method, path, headers: headers, body: body)
            else { return }
            response = answer
        }
        if case .dropResponse = fault {
            lock.withLock { droppedCount += 1 }
            return
        }
        var head = "HTTP/1.1 \(response.status) X\r\n"
        for (name, value) in response.headers where !["content-length", "transfer-encoding", "connection"].contains(name.lowercased()) {
            head += "\(name): \(value)\r\n"
        }
        head += "Content-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array(head.utf8) + response.body
        var sent = 0
        while sent < bytes.count {
            let written = bytes[sent...].withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
            guard written > 0 else { return }
            sent += written
        }
    }

    private func readRequest(_ client: Int32) -> (String, String, [String: String], [UInt8])? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        var contentLength = 0
        var parsed: (String, String, [String: String])?
        while true {
            if headEnd == nil, let range = buffer.firstRange(of: separator) {
                headEnd = range.upperBound
                let lines = String(decoding: buffer[..<range.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
                let requestLine = lines.first?.split(separator: " ") ?? []
                guard requestLine.count >= 2 else { return nil }
                var headers: [String: String] = [:]
                for line in lines.dropFirst() {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    let name = String(line[..<colon])
                    let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                    if name.lowercased() == "content-length" { contentLength = Int(value) ?? 0; continue }
                    if ["host", "connection", "expect"].contains(name.lowercased()) { continue }
                    headers[name] = value
                }
                parsed = (String(requestLine[0]), String(requestLine[1]), headers)
            }
            if let headEnd, let parsed, buffer.count - headEnd >= contentLength {
                return (parsed.0, parsed.1, parsed.2, Array(buffer[headEnd..<(headEnd + contentLength)]))
            }
            let count = chunk.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
            guard count > 0 else { return nil }
            buffer.append(contentsOf: chunk[0..<count])
        }
    }
}
