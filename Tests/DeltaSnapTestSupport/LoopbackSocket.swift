import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The TCP plumbing the test clients and proxies share: a listener on 127.0.0.1 and a free
/// port, and a connection to a loopback port. Loopback only, by construction.
///
/// ```swift
/// let (listener, port) = try LoopbackSocket.listen()
/// let upstream = try LoopbackSocket.connect(to: server.port)
/// ```
package enum LoopbackSocket {
    /// A listening socket on 127.0.0.1 and the port the kernel picked.
    package static func listen(backlog: Int32 = 64) throws -> (socket: Int32, port: Int) {
        let listener = makeSocket()
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, startListening(listener, backlog) == 0 else {
            close(listener)
            throw RawHTTPClient.Failure(description: "could not listen on 127.0.0.1 (errno \(errno))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        return (listener, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A connected socket to 127.0.0.1:`port`, reads timing out after `timeoutSeconds` (nil: never).
    package static func connect(to port: Int, timeoutSeconds: Int? = nil) throws -> Int32 {
        let descriptor = makeSocket()
        guard descriptor >= 0 else { throw RawHTTPClient.Failure(description: "socket() failed") }
        if let timeoutSeconds {
            var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        var address = loopback(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connectSocket(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(descriptor)
            throw RawHTTPClient.Failure(description: "connect to 127.0.0.1:\(port) failed (errno \(errno))")
        }
        return descriptor
    }

    /// Accepts connections on `listener` until `isStopped` says so (after the listener was
    /// shut down), calling `handle` with each on a thread of its own; then closes the listener.
    /// Only this thread closes it: closed by the one stopping it, its number could be reused
    /// (another test's listener) before this thread's next `accept`, which would then take
    /// that listener's connections.
    package static func acceptEach(on listener: Int32, isStopped: @escaping @Sendable () -> Bool, _ handle: @escaping @Sendable (Int32) -> Void) {
        Thread {
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 {
                    if isStopped() {
                        close(listener)
                        return
                    }
                    continue
                }
                Thread { handle(client) }.start()
            }
        }.start()
    }

    private static func makeSocket() -> Int32 {
        #if canImport(Glibc)
        socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        socket(AF_INET, SOCK_STREAM, 0)
        #endif
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}

// At file scope, where the type's own `listen` and `connect` do not hide the system's.
private func startListening(_ socket: Int32, _ backlog: Int32) -> Int32 { listen(socket, backlog) }
private func connectSocket(_ socket: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 { connect(socket, address, length) }
