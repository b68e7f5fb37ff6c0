import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// nginx from Debian's packages as a shared cache (`proxy_cache` with `proxy_cache_lock`) in
/// front of a server on 127.0.0.1, on a free loopback port; stopped by PID. Its access log
/// says, per request, whether the origin was asked (`$upstream_cache_status`).
///
/// ```swift
/// let cache = try NginxCache.start(originPort: server.port, in: directory.path)
/// defer { cache.stop() }
/// let originRequests = cache.originRequests()     // URIs nginx fetched from the origin
/// ```
package final class NginxCache: Sendable {
    package let port: Int
    package let directory: String
    private let process: Spawned

    package var baseURL: String { "http://127.0.0.1:\(port)" }

    private init(port: Int, directory: String, process: Spawned) {
        self.port = port
        self.directory = directory
        self.process = process
    }

    /// The nginx binary; a test that needs it fails (never skips) when it is missing.
    package static var binary: String? {
        ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    package static func start(originPort: Int, in parent: String) async throws -> NginxCache {
        try await offPool { try start(originPort: originPort, in: parent) }
    }

    @available(*, noasync, message: "it blocks a thread of the cooperative pool, which the in-process test servers answer on: await the async form")
    package static func start(originPort: Int, in parent: String) throws -> NginxCache {
        guard let binary else { throw RawHTTPClient.Failure(description: "nginx is not installed (.ci/install-deps.sh installs it)") }
        let directory = (parent as NSString).appendingPathComponent("nginx")
        for sub in ["", "cache", "tmp"] {
            let path = (directory as NSString).appendingPathComponent(sub)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            // Workers of a root-started nginx run as an unprivileged user: let them write.
            chmod(path, 0o777)
        }
        chmod(parent, 0o755)
        let port = try Self.freeLoopbackPort()
        let config = """
            daemon off;
            worker_processes 1;
            pid \(directory)/nginx.pid;
            error_log \(directory)/error.log warn;
            events { worker_connections 512; }
            http {
                log_format cache '$request_uri $status $upstream_cache_status';
                access_log \(directory)/access.log cache;
                client_body_temp_path \(directory)/tmp/body;
                proxy_temp_path \(directory)/tmp/proxy;
                fastcgi_temp_path \(directory)/tmp/fastcgi;
                uwsgi_temp_path \(directory)/tmp/uwsgi;
                scgi_temp_path \(directory)/tmp/scgi;
                proxy_cache_path \(directory)/cache levels=1:2 keys_zone=deltasnap:10m max_size=256m inactive=1h use_temp_path=off;
                server {
                    listen 127.0.0.1:\(port);
                    location / {
                        proxy_pass http://127.0.0.1:\(originPort);
                        proxy_http_version 1.1;
                        proxy_set_header Connection "";
                        proxy_cache deltasnap;
                        proxy_cache_lock on;
                        proxy_cache_lock_timeout 10s;
                        proxy_cache_revalidate on;
                        proxy_cache_use_stale updating error timeout;
                        proxy_cache_background_update on;
                        # A client that asks for revalidation (Cache-Control: no-cache) gets the origin.
                        proxy_cache_bypass $http_cache_control;
                    }
                }
            }
            """
        let configPath = (directory as NSString).appendingPathComponent("nginx.conf")
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        let process = try Spawned(binary, ["-e", "\(directory)/error.log", "-p", directory, "-c", configPath], stdout: .discard, stderr: .discard)
        let cache = NginxCache(port: port, directory: directory, process: process)
        // Ready when it accepts a connection.
        for _ in 0..<100 {
            if (try? RawHTTPClient(port: port)) != nil { return cache }
            guard process.isRunning else { break }
            usleep(50_000)
        }
        cache.stop()
        let log = (try? String(contentsOfFile: "\(directory)/error.log", encoding: .utf8)) ?? ""
        throw RawHTTPClient.Failure(description: "nginx did not start: \(log)")
    }

    /// SIGTERM (graceful), then waits for the exit.
    package func stop() {
        process.stop()
    }

    /// Access log lines: `URI STATUS CACHE_STATUS` (`-` when the cache was not involved).
    package func accessLog() -> [(uri: String, status: Int, cache: String)] {
        let text = (try? String(contentsOfFile: "\(directory)/access.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count >= 3, let status = Int(parts[1]) else { return nil }
            return (String(parts[0]), status, String(parts[2]))
        }
    }

    /// A port nothing listens on right now (the kernel's pick for port 0).
    package static func freeLoopbackPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RawHTTPClient.Failure(description: "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else { throw RawHTTPClient.Failure(description: "bind() failed") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
