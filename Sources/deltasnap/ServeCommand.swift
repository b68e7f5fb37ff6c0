import ArgumentParser
import DeltaSnapServer
import Foundation
import Logging

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve collections over HTTP: conditional GETs answered with 304, a delta or a full body.",
        discussion: """
            GET  /v1/collections                       every collection's head
            GET  /v1/collections/NAME                  304, delta or full (If-None-Match / If-Modified-Since)
            PUT  /v1/collections/NAME/records/ID       upsert   (Authorization: Bearer TOKEN)
            DELETE /v1/collections/NAME/records/ID     hide     (Authorization: Bearer TOKEN)
            POST /v1/collections/NAME/records          a batch of NDJSON or a JSON array (?replace=true)
            GET  /healthz, /metrics

            Imports by other processes into the same store are picked up within 100 ms.
            Stops gracefully on SIGINT or SIGTERM.
            """
    )

    @Option(name: .long, help: "Path of the SQLite store (created if missing).")
    var db: String

    @Option(name: .long, help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(name: .long, help: "Port to listen on (0 picks a free one).")
    var port = 8080

    @Option(name: .long, help: "Bearer token for the write API (or DELTASNAP_WRITE_TOKEN). Without one, writes answer 403.")
    var writeToken: String?

    @Option(name: .long, help: "Largest write body in bytes (413 above).")
    var maxBodyBytes = 32 * 1024 * 1024

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0...65535") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical") }
        guard maxBodyBytes > 0 else { throw ValidationError("--max-body-bytes must be positive") }
    }

    func run() async throws {
        try await reportingErrors {
            var logger = Logger(label: "deltasnap")
            logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
            let token = writeToken ?? ProcessInfo.processInfo.environment["DELTASNAP_WRITE_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
            let server = try DeltaSnapServer(
                configuration: .init(databasePath: db, writeToken: token, maximumWriteBodyBytes: maxBodyBytes),
                logger: logger)
            let host = self.host
            try await server.run(host: host, port: port) { boundPort in
                // One parseable line on stdout: scripts and tests wait for it.
                // Written straight to the file handle: print() would sit in stdio's buffer.
                StandardOutput().write(Array("deltasnap: serving \(db) on http://\(host):\(boundPort) (writes \(token == nil ? "disabled" : "enabled"))\n".utf8))
            }
        }
    }
}
