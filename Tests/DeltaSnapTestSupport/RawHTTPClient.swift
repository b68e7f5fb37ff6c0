import DeltaSnapCore
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A minimal blocking HTTP/1.1 client over one TCP connection to 127.0.0.1, for tests that
/// must see the exact bytes on the wire (gzip vs identity, headers, keep-alive across
/// requests) — things URLSession hides.
///
/// Its calls block: an async test awaits their async forms, which run them on a thread of
/// their own. Blocking a thread of the cooperative pool (two on this machine) stalls every
/// in-process test server's router, and clients elsewhere in the run time out or are cut.
///
/// Used by one task at a time (`@unchecked`: the async forms hand it to another thread).
package final class RawHTTPClient: @unchecked Sendable {
    package struct Response: Sendable {
        package var status: Int
        package var headers: [(String, String)]
        /// The body as sent (still gzip-encoded when Content-Encoding says so).
        package var body: [UInt8]
        /// The informational (1xx) responses sent before this one, in order.
        package var informational: [Response] = []

        package func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }

        /// The body decoded from gzip when it was sent gzip-encoded.
        package func decodedBody() throws -> [UInt8] {
            header("Content-Encoding") == "gzip" ? try GzipDecompressor.decompress(body) : body
        }

        package var text: String { String(decoding: (try? decodedBody()) ?? body, as: UTF8.self) }
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String

        package init(description: String) {
            self.description = description
        }
    }

    private let socket: Int32
    private var buffer: [UInt8] = []
    package let port: Int

    package init(port: Int, timeoutSeconds: Int = 30) throws {
        self.port = port
        socket = try LoopbackSocket.connect(to: port, timeoutSeconds: timeoutSeconds)
    }

    deinit {
        close(socket)
    }

    /// Sends one request and reads the whole response.
    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: call it inside offPool")
    package func request(_ method: String = "GET", _ path: String, headers: [String: String] = [:], body: [UInt8] = []) throws -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" || method == "PUT" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        try send(Array(head.utf8) + body)
        do {
            return try readResponse(method: method)
        } catch let failure as Failure {
            // Which request it was: a test names the failing step without prints.
            throw Failure(description: "\(failure.description) (answering \(method) \(path))")
        }
    }

    /// ``request(_:_:headers:body:)`` off the cooperative pool.
    package func request(_ method: String = "GET", _ path: String, headers: [String: String] = [:], body: [UInt8] = []) async throws -> Response {
        try await offPool { try self.request(method, path, headers: headers, body: body) }
    }

    /// Sends `bytes` exactly as given (a hostile or broken request), optionally half-closes
    /// the connection, then reads one response; nil when the server closed without one.
    package func sendRaw(_ bytes: [UInt8], halfClose: Bool = false, method: String = "POST", awaitingResponse: Bool = true) throws -> Response? {
        try send(bytes)
        if halfClose { shutdown(socket, Int32(SHUT_WR)) }
        guard awaitingResponse else {
            // Let the bytes leave as their own segment before anything else is sent.
            usleep(50_000)
            return nil
        }
        do {
            return try readResponse(method: method)
        } catch let failure as Failure where failure.description.hasPrefix("connection closed") {
            return nil
        }
    }

    /// Reads the next response on this connection (after pipelined requests).
    package func nextResponse(method: String = "GET") throws -> Response {
        try readResponse(method: method)
    }

    private func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let result = bytes[sent...].withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
            guard result > 0 else { throw Failure(description: "write failed (errno \(errno))") }
            sent += result
        }
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
        guard count > 0 else { throw Failure(description: count == 0 ? "connection closed by the server" : "read failed (errno \(errno))") }
        buffer.append(contentsOf: chunk[0..<count])
    }

    private func readLine() throws -> String {
        while true {
            if let index = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = buffer[..<index]
                buffer.removeFirst(index + 1)
                return String(decoding: line.last == UInt8(ascii: "\r") ? line.dropLast() : line, as: UTF8.self)
            }
            try fill()
        }
    }

    private func readBytes(_ count: Int) throws -> [UInt8] {
        while buffer.count < count { try fill() }
        let bytes = Array(buffer[..<count])
        buffer.removeFirst(count)
        return bytes
    }

    private func readResponse(method: String) throws -> Response {
        var informational: [Response] = []
        while true {
            var response = try readOneResponse(method: method)
            guard (100..<200).contains(response.status) else {
                response.informational = informational
                return response
            }
            informational.append(response)
        }
    }

    fileprivate func readHead() throws -> Response {
        let statusLine = try readLine()
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { throw Failure(description: "bad status line: \(statusLine)") }
        var headers: [(String, String)] = []
        while true {
            let line = try readLine()
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)))
        }
        return Response(status: status, headers: headers, body: [])
    }

    private func readOneResponse(method: String) throws -> Response {
        var response = try readHead()
        let status = response.status
        if method == "HEAD" || status == 304 || status == 204 || (100..<200).contains(status) { return response }
        if response.header("Transfer-Encoding")?.lowercased() == "chunked" {
            while true {
                let sizeLine = try readLine()
                guard let size = Int(sizeLine.split(separator: ";")[0], radix: 16) else { throw Failure(description: "bad chunk size \(sizeLine)") }
                if size == 0 {
                    while try !readLine().isEmpty {}
                    break
                }
                response.body.append(contentsOf: try readBytes(size))
                _ = try readLine()
            }
        } else if let length = response.header("Content-Length").flatMap(Int.init) {
            response.body = try readBytes(length)
        }
        return response
    }
}

extension RawHTTPClient {
    /// Reads the next response head on this connection, an informational (1xx) one
    /// included, without its body: for a test that cuts a request after its `104`.
    package func nextHead() throws -> Response {
        try readHead()
    }

    /// Sends `bytes` as they are, without reading anything.
    package func sendBytes(_ bytes: [UInt8]) throws {
        _ = try sendRaw(bytes, awaitingResponse: false)
    }
}
