@testable import DeltaSnapServer
import DeltaSnapTestSupport
import Foundation
import Logging
import Testing

/// serve's log: lines in StreamLogHandler's format, held briefly and written in batches, an
/// error at once; the request line written without swift-log is byte for byte the line
/// swift-log would have written through the same handler.
@Suite struct BufferedLogTests {
    func lines(_ path: String) throws -> [String] {
        String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// A line without its timestamp (the first field).
    func untimed(_ line: String) -> Substring { line.drop { $0 != " " } }

    @Test func requestLinesAreBufferedErrorsAreNotAndBothPathsWriteTheSameBytes() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("serve.log")
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        #expect(descriptor >= 0)
        defer { close(descriptor) }
        let output = BufferedLogOutput(fileDescriptor: descriptor, interval: .seconds(3600))
        var logger = Logger(label: "deltasnap") { BufferedLogHandler(label: $0, output: output, metadataProvider: nil) }
        logger.logLevel = .info

        let start = ContinuousClock.now
        RequestLog(logger: logger, output: output).write(
            requestID: "abc-1", method: .get, path: "/v1/collections/items", status: .ok, since: start, bytes: 1428)
        RequestLog(logger: logger, output: nil).write(
            requestID: "abc-1", method: .get, path: "/v1/collections/items", status: .ok, since: start, bytes: 1428)
        #expect(try lines(path).isEmpty)  // held: no write per line

        logger.error("store unreachable", metadata: ["error": "x"])
        let written = try lines(path)
        #expect(written.count == 3)  // the error brought the waiting lines out with it, in order
        let direct = untimed(written[0]), viaSwiftLog = untimed(written[1])
        // Equal but for the measured duration.
        let withoutDuration = { (line: Substring) in line.replacingOccurrences(of: #"duration_ms=[0-9.]+"#, with: "", options: .regularExpression) }
        #expect(withoutDuration(direct) == withoutDuration(viaSwiftLog))
        #expect(direct.hasPrefix(" info deltasnap: bytes=1428 duration_ms="))
        // Both write milliseconds with three decimals.
        #expect(direct.range(of: #"duration_ms=[0-9]+\.[0-9]{3} "#, options: .regularExpression) != nil)
        #expect(viaSwiftLog.range(of: #"duration_ms=[0-9]+\.[0-9]{3} "#, options: .regularExpression) != nil)
        #expect(RequestLog.milliseconds(.microseconds(42)) == "0.042" && RequestLog.milliseconds(.microseconds(12_345)) == "12.345")
        #expect(direct.hasSuffix(" method=GET path=/v1/collections/items request_id=abc-1 status=200 [DeltaSnapServer] request"))
        #expect(written[2].hasSuffix(" error deltasnap: error=x [DeltaSnapServerTests] store unreachable"))
        #expect(written[0].utf8.count > 24 && written[0].dropFirst(19).hasPrefix("+0000 "))

        logger.info("after")
        output.flush()
        #expect(try lines(path).count == 4)
    }
}
